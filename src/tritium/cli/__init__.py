"""The command line: ``tritium serve`` (``main.py``: Triton's flags → ``ServerOptions``, then
the runtime) and the table of every ``tritonserver`` flag with tritium's decision
(``flags/``)."""
