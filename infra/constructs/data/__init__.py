"""What the deployment keeps: its buckets and tables (``storage``) and the log group of live training logs
(``training_logs``).
"""
