"""``pytriton.proxy``: only its ``types`` (``Request``, ``Response``) have a meaning here (the
bound callable runs in the server's process: there is no proxy)."""
