"""What makes a reload an instance-group update (issue 45 item 1): Triton's
ConfigChangeRequiresReload (equal but for instance_group and version_policy) and the model's
other files unchanged."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritium.config.model_config import ModelConfig
from tritium.repository.instance_update import model_files, only_instances_changed


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
