"""Statistics and metrics: what is counted per model (``stats.py``: ``ModelStats``, the
statistics extension's numbers), the latency windows behind summaries and histograms
(``latency.py``), the ``--metrics-config`` settings (``settings.py``), Python models' custom
metrics (``custom.py``), and their Prometheus rendering (``render.py``, ``render_latency.py``).

Nothing here imports a request, a model or a transport: the core records into these types and
the metrics endpoint renders them. Kept free of imports (the stub process imports ``custom``).
"""
