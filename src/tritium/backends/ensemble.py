"""Ensembles (``platform: "ensemble"``): no instances of their own, only a plan over the
composing models (``ModelSpec.ensemble``); ``model.py`` gives such a model the scheduler that
walks it."""

from __future__ import annotations

import dataclasses

from ..config.ensemble import build_plan
from ..config.spec import ModelSpec
from .base import LoadContext, ModelInstance


class EnsembleBackend:
    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        config = ctx.config
        assert ctx.composing is not None, "the repository manager resolves composing models"
        if not config.name:  # Triton names a config without "name:" after its directory
            config.name = ctx.model_name
        plan = build_plan(config, ctx.composing)
        # Triton: an ensemble is decoupled exactly when one of its steps is, whatever the
        # config says; it has a platform and no backend.
        config.model_transaction_policy.decoupled = plan.decoupled
        config.backend = ""
        spec = ctx.finalize(config)
        return dataclasses.replace(spec, ensemble=plan), []
