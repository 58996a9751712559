"""The GPU instances' side: their role, launch templates and the agent's SSM document (``instances``), and where
they run: subnets, cluster placement groups and the security group (``network``).
"""
