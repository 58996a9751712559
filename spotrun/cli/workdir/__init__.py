"""``training.workdir`` from the CLI: pack a local directory into a deterministic archive (``pack``) and upload
it content-addressed through the API (``upload``).
"""
