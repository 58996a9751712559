"""spotrun: deep-learning training on EC2 Spot GPU instances, brought to completion through interruptions.

The folders are layers, each importing only those below it (``[tool.importlinter]`` in pyproject.toml):
``model`` (pure), ``control`` (use cases over ports), ``aws`` and ``agent`` (adapters, the instance's agent),
``local`` (the embedded emulator), ``cli``. ``shape`` declares the deployment once; ``training`` is what a
user's training script imports.
"""
