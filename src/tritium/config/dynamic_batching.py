"""``dynamic_batching`` checked as Triton core's ValidateModelConfig does: preferred batch sizes
positive and at most ``max_batch_size``; with priority levels, the default level and every
priority queue policy's level in [1, priority_levels]; with ``preserve_ordering``, one priority
level and no queue policy that delays on timeout. Triton's messages."""

from __future__ import annotations

from .model_config import ConfigProblem, ModelConfig, mc

_FIELD = "dynamic_batching"


def check_dynamic_batching(config: ModelConfig, problem: ConfigProblem) -> None:
    """Raise the ServerError Triton's load gives for a dynamic batcher it refuses."""
    if not config.HasField("dynamic_batching"):
        return
    db, name = config.dynamic_batching, config.name
    for size in db.preferred_batch_size:
        if size <= 0:
            raise problem.error(
                f"{_FIELD}.preferred_batch_size",
                f"dynamic batching preferred size must be positive for {name}",
            )
        if size > config.max_batch_size:
            raise problem.error(
                f"{_FIELD}.preferred_batch_size",
                f"dynamic batching preferred size must be <= max batch size for {name}",
            )
    _check_priorities(db, name, problem)
    if db.preserve_ordering:
        _check_ordering(db, name, problem)


def _check_priorities(db: mc.ModelDynamicBatching, name: str, problem: ConfigProblem) -> None:
    levels = db.priority_levels
    if levels == 0:
        return
    if db.default_priority_level == 0 or db.default_priority_level > levels:
        raise problem.error(
            f"{_FIELD}.default_priority_level",
            f"default priority level must be in range [1, {levels}] for {name}",
        )
    for level in db.priority_queue_policy:
        if level == 0 or level > levels:
            raise problem.error(
                f"{_FIELD}.priority_queue_policy",
                f"priority queue policy must have priority level in range [1, {levels}] for {name}",
            )


def _check_ordering(db: mc.ModelDynamicBatching, name: str, problem: ConfigProblem) -> None:
    if db.priority_levels > 1:
        raise problem.error(
            f"{_FIELD}.preserve_ordering",
            f"Only one priority level is allowed when 'preserve_ordering' is true for {name}",
        )
    policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
    for policy in policies:
        if (
            policy.default_timeout_microseconds != 0
            and policy.timeout_action == mc.ModelQueuePolicy.DELAY
        ):
            raise problem.error(
                f"{_FIELD}.preserve_ordering",
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                f"is true for {name}",
            )
