"""tritium's benchmarks (bench/README.md): ``bench/run.py`` is the command; the modules are
laid out in common.py's docstring."""
