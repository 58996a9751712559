"""The emulator's spot capacity: what it offers (``catalog``), pools with a price, a capacity and a boot delay
(``pools``), and pools driven tick by tick by a recorded trace (``trace_pools``).
"""
