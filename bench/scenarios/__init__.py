"""The scenario lists, one module each (``--issue NAME``); catalog.py registers them."""
