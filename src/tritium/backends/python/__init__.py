"""The Python backend: Triton ``model.py`` files run unchanged, one stub process per instance."""
