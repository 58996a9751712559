"""S3 transfers at the instance's ceiling, verified: ``download`` (staging's engine: ranged GETs for large
objects, ``whole_objects`` and ``crt_gets`` for small ones, what to copy: ``plan``), ``upload`` (one file:
one PUT or parallel parts), and their parts: ``ranges``, ``integrity`` and ``crcs`` (which check an object gets
and its CRCs), ``file_writes``, ``allocator``, and the clients' configuration (``client_config``).
"""
