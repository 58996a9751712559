"""The emulator's spot capacity: what it offers (``catalog``), pools with a price, a capacity and a boot delay
(``pools``), a group's launch in one pool or none (``groups``), the CreateFleet errors a test injects
(``injected_errors``), and pools driven tick by tick by a recorded trace (``trace_pools``).
"""
