"""Where a job's instances come from and what they cost: the GPU instance types (``instance_types``,
``on_demand_prices``, ``pricing``), the candidate pools and the spot/on-demand choice (``candidates``), EC2
CreateFleet's request, order and errors (``fleet_request``, ``fleet_order``, ``fleet_errors``), how a multi-node
group launches (``group_launch``: EFA template, placement groups, EFA environment), EC2's state names
(``ec2_states``), and waiting when no pool has capacity (``wait``).
"""
