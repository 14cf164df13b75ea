"""What makes a reload an instance-group update (issue 45 item 1): Triton's
ConfigChangeRequiresReload (equal but for instance_group and version_policy) and the model's
other files unchanged."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritium.config.model_config import ModelConfig
from tritium.repository.instance_update import (
    model_files,
    only_instances_changed,
    server_normalized,
)


def config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


BASE = 'name: "m" backend: "python" max_batch_size: 4 '


def test_only_instance_groups_and_version_policy_may_differ() -> None:
    old = config(BASE + "instance_group [{ count: 1 }]")
    assert only_instances_changed(old, config(BASE + "instance_group [{ count: 3 }]"))
    assert only_instances_changed(old, config(BASE + "version_policy { all {} }"))
    assert not only_instances_changed(old, config(BASE.replace("4", "8")))
    changed = BASE + 'parameters { key: "P" value: { string_value: "x" } }'
    assert not only_instances_changed(old, config(changed + "instance_group [{ count: 1 }]"))


def test_the_served_config_compares_equal_to_the_file_it_came_from() -> None:
    """The load API's ``config`` is usually the served (completed) config: compared as the
    server normalizes both (Triton's GetNormalizedModelConfig), only the count differs."""
    on_disk = config('name: "m" backend: "python" dynamic_batching {} max_batch_size: 4')
    served = config(
        'name: "m" backend: "python" max_batch_size: 4 default_model_filename: "model.py" '
        "dynamic_batching { preferred_batch_size: 4 } "
        "version_policy { latest { num_versions: 1 } } "
        "optimization { input_pinned_memory { enable: true } "
        "output_pinned_memory { enable: true } } "
        'instance_group [{ name: "m_0" kind: KIND_CPU count: 2 }]'
    )
    assert not only_instances_changed(on_disk, served)
    old, new = server_normalized(on_disk, "m", []), server_normalized(served, "m", [])
    assert old is not None and new is not None
    assert only_instances_changed(old, new)
    other = config('name: "m" backend: "python" dynamic_batching {} max_batch_size: 8')
    changed = server_normalized(other, "m", [])
    assert changed is not None and not only_instances_changed(old, changed)


def test_a_config_normalizing_refuses_is_left_to_the_full_load() -> None:
    assert server_normalized(config('name: "other" backend: "python"'), "m", []) is None


def test_model_files_leave_out_the_configs_and_caches(tmp_path: Path) -> None:
    (tmp_path / "1" / "__pycache__").mkdir(parents=True)
    (tmp_path / "configs").mkdir()
    (tmp_path / "1" / "model.py").write_text("code")
    (tmp_path / "1" / "__pycache__" / "model.pyc").write_text("cache")
    (tmp_path / "config.pbtxt").write_text("a")
    (tmp_path / "configs" / "small.pbtxt").write_text("b")
    (tmp_path / "labels.txt").write_text("cat")
    before = model_files(tmp_path)
    assert [entry[0] for entry in before] == ["1/model.py", "labels.txt"]
    (tmp_path / "config.pbtxt").write_text("a changed config")
    assert model_files(tmp_path) == before
    (tmp_path / "labels.txt").write_text("cat\ndog")
    assert model_files(tmp_path) != before
