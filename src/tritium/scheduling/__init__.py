"""Schedulers: how requests reach a model's instances."""
