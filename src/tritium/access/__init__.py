"""Access control without a transport: API groups, restricted APIs, bearer tokens and per-client
bounds (``policy.py``), and the audit log (``audit.py``). Each front-end applies them at its
one dispatch point (``frontends/http/access.py``, ``frontends/grpc/guard.py``)."""
