"""Injected failures in the emulator: spot interruptions as AWS FIS sends them and silent deaths
(``interruptions``), where they fall in a run (``plan``), and the thread that fires them at a step (``injector``).
"""
