"""Backends: how a model version is loaded into instances and executed."""
