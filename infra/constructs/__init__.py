"""One construct per capability, grouped by what it deploys: the functions' permissions (``iam``), the GPU
instances and their network (``compute``), the serverless control plane (``control_plane``), the buckets, tables
and log group (``data``), and the alarms (``monitoring``); :class:`infra.stack.SpotrunStack` only composes them.
"""
