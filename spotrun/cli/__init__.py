"""The ``spotrun`` command (``app``): one module per command group, all talking to the REST API through
``client`` at the ``target`` the options name. ``display`` renders for people; ``workdir`` packs and uploads
a local training directory.
"""
