from pathlib import Path

import pytest

from astuner.components import build_reader, check_plugin_blocks
from astuner.config import load_config, parse_overrides
from astuner.errors import ConfigError
from astuner.logs import configure_logging


def test_defaults_without_a_file() -> None:
    config = load_config(None, environ={})
    assert config.rollout.num_repeat == 4
    assert config.rollout.temperature == 0.9
    assert config.task_reader.type == "arith"
    assert config.task_judge.judge_protocol == "exact"
    assert config.rollout.compute_madness_checklist == ["nonsense"]
    assert config.experiment_name == "default"


def test_precedence_defaults_yaml_env_override(write_config) -> None:
    path = write_config({"rollout": {"temperature": 0.5, "top_p": 0.8, "num_repeat": 2, "max_env_worker": 3}})
    env = {"ASTUNER__ROLLOUT__TEMPERATURE": "0.6", "ASTUNER__ROLLOUT__TOP_P": "0.7"}
    config = load_config(path, ["rollout.temperature=0.7"], environ=env)
    assert config.rollout.temperature == 0.7  # -o beats env and YAML
    assert config.rollout.top_p == 0.7  # env beats YAML
    assert config.rollout.num_repeat == 2  # YAML beats default
    assert config.rollout.max_model_len == 18000  # default
    assert config.experiment_name == "conf"  # read_yaml_name -> file stem


def test_overrides_parse_yaml_scalars_and_lists() -> None:
    assert parse_overrides(["a.b=1", "a.c=[x, y]", "d=true", "astuner.e=hi"]) == {
        "a": {"b": 1, "c": ["x", "y"]},
        "d": True,
        "e": "hi",
    }
    with pytest.raises(ConfigError, match=r"write it as -o section\.key=value"):
        parse_overrides(["rollout.temperature"])


def test_unknown_key_names_key_file_line_and_nearest(write_config) -> None:
    path = write_config({"project_name": "p", "rollout": {"temprature": 0.1}})
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = str(err.value)
    assert "Unknown key 'rollout.temprature'" in message
    assert f"config file '{path}' (line 4)" in message
    assert "Did you mean 'rollout.temperature'?" in message


def test_wrong_type_names_key_and_value(write_config) -> None:
    path = write_config({"rollout": {"temperature": "hot"}})
    with pytest.raises(ConfigError, match=r"Invalid value for 'rollout.temperature' in config file .*'hot'"):
        load_config(path, environ={})


def test_wrong_type_from_env_and_command_line_name_their_origin(write_config) -> None:
    path = write_config({})
    with pytest.raises(ConfigError, match=r"environment variable ASTUNER__ROLLOUT__NUM_REPEAT"):
        load_config(path, environ={"ASTUNER__ROLLOUT__NUM_REPEAT": "many"})
    with pytest.raises(ConfigError, match=r"the command line \(-o rollout.num_repeat=...\)"):
        load_config(path, ["rollout.num_repeat=many"], environ={})
    with pytest.raises(ConfigError, match="ASTUNER__ROLOUT__X names no config key 'rolout'"):
        load_config(path, environ={"ASTUNER__ROLOUT__X": "1"})


def test_missing_file_and_yaml_syntax_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("astuner:\n  rollout:\n    temperature: [0.1\n  data: {}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml' is not valid YAML at line \d+, column \d+"):
        load_config(bad, environ={})


def test_seed_style_file_loads_with_one_notice_per_spelling(tmp_path: Path, capsys) -> None:
    path = tmp_path / "math_agent.yaml"
    path.write_text(
        "astuner:\n  project_name: math_agent\n  rollout:\n"
        "    agentscope_learn_protocol: tutorial.math->MathWorkflow\n"
        "hydra:\n  searchpath:\n    - file://astuner/default_config\n"
        "defaults:\n  - verl_default\n  - _self_\n"
        "trinity:\n  algorithm:\n    algorithm_type: multi_step_grpo\n"
        "verl:\n  actor_rollout_ref:\n    actor:\n      ppo_mini_batch_size: 16\n"
    )
    configure_logging()
    config = load_config(path, environ={})
    load_config(path, environ={})  # a run loads its config more than once: still one notice each
    err = capsys.readouterr().err
    assert err.count("Hydra keys hydra, defaults are ignored") == 1
    assert err.count("'rollout.agentscope_learn_protocol' is now 'rollout.agentscope_workflow'") == 1
    assert err.count("Not used on backbone 'debug': trinity: block, verl: block.") == 1
    assert "Traceback" not in err
    assert config.rollout.agentscope_workflow == "tutorial.math->MathWorkflow"
    assert config.trinity == {"algorithm": {"algorithm_type": "multi_step_grpo"}}
    assert config.verl["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 16
    assert set(config.to_yaml_dict()) == {"astuner", "verl", "trinity"}


def test_unknown_top_level_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("astuner: {}\nrollout:\n  temperature: 1\n")
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\): rollout.*under 'astuner:'"):
        load_config(path, environ={})


def test_plugin_blocks_are_checked_and_validated(write_config, plugins) -> None:
    path = write_config({"task_reader": {"type": "arith", "arith": {"difficulty": "medium"}}})
    config = load_config(path, environ={})
    check_plugin_blocks(config, plugins)
    reader = build_reader(config, plugins)
    assert reader.settings.difficulty == "medium"

    typo = load_config(write_config({"task_reader": {"type": "arith", "arth": {}}}), environ={})
    with pytest.raises(
        ConfigError, match=r"Unknown key 'task_reader.arth'.*Did you mean 'task_reader.arith'"
    ):
        check_plugin_blocks(typo, plugins)

    stray = load_config(write_config({"tourch": {"lr": 1}}), environ={})
    with pytest.raises(ConfigError, match=r"Unknown key 'tourch'.*neither a top-level key nor"):
        check_plugin_blocks(stray, plugins)

    bad = load_config(write_config({"task_reader": {"arith": {"difficulty": "extreme"}}}), environ={})
    with pytest.raises(ConfigError, match=r"Invalid value for 'task_reader.arith.difficulty'.*'extreme'"):
        build_reader(bad, plugins)


def test_a_config_that_is_not_utf8_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"astuner:\n  project_name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml' is not UTF-8 text: byte 0xe9 at line 2, column 20"):
        load_config(path, environ={})


def test_an_old_spelling_in_the_environment_is_read_once_and_renamed(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("astuner: {}\n")
    monkeypatch.setenv("ASTUNER__ROLLOUT__AGENTSCOPE_LEARN_PROTOCOL", "flows->Flow")
    monkeypatch.setenv("ASTUNER__ROLLOUT__TEMPERATURE", "0.3")
    config = load_config(path, ["rollout.temperature=0.5"])
    assert config.rollout.agentscope_workflow == "flows->Flow"
    assert config.rollout.temperature == 0.5  # -o beats the environment
    old = "ASTUNER__ROLLOUT__AGENTSCOPE_LEARN_PROTOCOL, alias of rollout.agentscope_learn_protocol"
    assert config.origins.origin_of("rollout.agentscope_workflow") == f"env {old}"
