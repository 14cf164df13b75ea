"""Logging (Triton's ``gLogger_``): the log flags as state, Triton's record layouts, the level
filter and the logging extension's checks (``settings.py``); Triton's ASCII tables, the
start-up model table (``table.py``)."""
