"""Injected failures in the emulator: spot interruptions as AWS FIS sends them and silent deaths
(``interruptions``), where they fall in a run (``plan``), the thread that fires them at a step (``injector``), and
the runtime's hands on its simulated fleet: find, wait for, reclaim, kill, hang and resume instances (``controls``).
"""
