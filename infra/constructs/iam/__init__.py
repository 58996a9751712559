"""What each Lambda function may do in AWS (``permissions``, with its vocabulary in ``grant_types``, launching in
``grants_launch``, the bus and schedules in ``grants_scheduling``, S3 keys in ``bucket_access``), and the
job-access role whose sessions give an instance one job's S3 access (``job_access``).
"""
