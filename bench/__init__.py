"""tritium's benchmarks (bench/README.md): ``python -m bench <suite> [flags]`` is the one
command (bench/__main__.py; the suites are registered in bench/suites.py, the /proc reader of
a process tree is bench/proctree.py); the modules are laid out in common.py's docstring."""
