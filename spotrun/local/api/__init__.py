"""API Gateway in the emulator: the REST proxy integration (``gateway``) and who may call it, with SigV4
signatures verified (``auth``).
"""
