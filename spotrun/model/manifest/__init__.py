"""The job manifest: its schema (``schema.JobManifest``), its sections (``training``, ``capacity``,
``deadline``, ``secrets``, ``schedule_expressions``), the rules its fields share (``rules``, ``exec_limits``), and
its readers: ``parse`` turns YAML or JSON text into a validated manifest, within the bounds ``json_text`` and
``yaml_text`` keep.
"""
