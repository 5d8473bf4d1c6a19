"""Odd and deep keys from `-o` and ASTUNER__ variables: clear errors that name the override."""

from pathlib import Path

import pytest

from astuner.components import build_reader, check_plugin_blocks
from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.testing.cli import run_astuner


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.yaml"
    path.write_text("astuner:\n  project_name: p\n  task_reader: {type: arith}\n", encoding="utf-8")
    return path


def test_a_dunder_key_from_the_command_line_is_blamed_on_the_override(base: Path) -> None:
    result = run_astuner("config", "show", "--conf", str(base), "-o", "__class__.x=5", cwd=base.parent)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "Unknown key '__class__' in the command line (-o __class__=...)" in result.stderr
    assert "base.yaml" not in result.stderr


def test_plugin_keys_set_by_o_or_the_environment_are_never_blamed_on_the_file(base: Path, plugins) -> None:
    stray = load_config(base, ["task_reader.__class__.x=5"], environ={})
    with pytest.raises(ConfigError, match=r"'task_reader.__class__' in the command line \(-o task_reader"):
        check_plugin_blocks(stray, plugins)
    from_env = load_config(base, environ={"ASTUNER__TASK_READER__FOO__X": "5"})
    with pytest.raises(
        ConfigError, match=r"'task_reader.foo' in environment variable ASTUNER__TASK_READER__FOO"
    ):
        check_plugin_blocks(from_env, plugins)
    bad = load_config(base, ["task_reader.arith.seed=many"], environ={})
    with pytest.raises(
        ConfigError, match=r"'task_reader.arith.seed' in the command line \(-o task_reader.arith.seed=...\)"
    ):
        build_reader(bad, plugins)
    bad_env = load_config(base, environ={"ASTUNER__TASK_READER__ARITH__SEED": "many"})
    with pytest.raises(ConfigError, match=r"environment variable ASTUNER__TASK_READER__ARITH__SEED: Input"):
        build_reader(bad_env, plugins)


def test_a_key_five_thousand_levels_deep_names_the_override_in_one_line(base: Path) -> None:
    for key in (".".join(["a"] * 5000), ".".join(["verl"] * 5000)):
        with pytest.raises(ConfigError) as err:
            load_config(base, [f"{key}=5"], environ={})
        message = str(err.value)
        assert message.startswith(f"The override '{key[:60]}... (")
        assert "names a key 5000 levels deep" in message and "at most 100" in message
        assert len(message) < 300


def test_environment_keys_too_deep_or_empty_and_json_too_deep_name_the_variable(base: Path) -> None:
    deep = "ASTUNER__" + "__".join(["VERL"] * 5000)
    with pytest.raises(ConfigError, match=r"Environment variable ASTUNER__VERL__.*names a key 5000 levels"):
        load_config(base, environ={deep: "5"})
    for name in ("ASTUNER____CLASS____X", "ASTUNER__ROLLOUT____CLASS__"):
        with pytest.raises(ConfigError, match=rf"Environment variable {name} names an empty key"):
            load_config(base, environ={name: "5"})
    for value in ("[" * 5000 + "]" * 5000, '{"a": ' * 150 + "1" + "}" * 150):
        with pytest.raises(ConfigError, match=r"ASTUNER__VERL holds JSON nested more than 100 levels"):
            load_config(base, environ={"ASTUNER__VERL": value})


def test_ordinary_deep_keys_still_load(base: Path) -> None:
    config = load_config(
        base,
        ["verl.actor_rollout_ref.actor.fsdp_config.param_offload=true"],
        environ={"ASTUNER__VERL__TRAINER__LOGGER": '["console", {"a": [1]}]'},
    )
    assert config.verl["actor_rollout_ref"]["actor"]["fsdp_config"]["param_offload"] is True
    assert config.verl["trainer"]["logger"] == ["console", {"a": [1]}]
