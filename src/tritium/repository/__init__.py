"""Model repositories: layout scan, names checks, the load manager and model control modes;
a loaded version (``model.py:Model``) and its warm-up (``warmup.py``)."""
