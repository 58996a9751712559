"""The read-only web dashboard (``spotrun dashboard``, and ``spotrun local up``): a Flask app over the REST API.

It owns the pages (:mod:`.app`: the job list, a job's page with the report's content, the schedules and their
runs), the server that serves them on 127.0.0.1 (:mod:`.serve`) and the command (:mod:`.command`). Every figure it
shows comes from the API through a :class:`spotrun.cli.client.SpotrunClient`, with the caller's credentials; it
keeps nothing and changes nothing.
"""
