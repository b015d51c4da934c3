"""One module per subcommand of ``python -m autograde.pipeline`` (as nbgrader keeps one app per subcommand):
``autograde``, ``merge_shards``, ``feedback``, ``grades``, ``sample``, ``probe``, ``prepare``, ``settings``.
``autograde/pipeline.py`` reads the command line and the course's settings, and calls the subcommand's module."""
