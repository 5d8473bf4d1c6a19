"""YAML a user wrote cannot make the config blow up: alias bombs, self-references, deep nesting."""

import time
from pathlib import Path

import pytest

from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.testing.cli import run_astuner


def alias_bomb(levels: int, mapping: bool = False) -> str:
    """`levels` anchors, each holding nine aliases of the one before: 9**levels values once expanded."""

    def collection(items: list[str]) -> str:
        if mapping:
            return "{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"
        return "[" + ", ".join(items) + "]"

    lines = [f"    a0: &a0 {collection(['lol'] * 9)}"]
    lines += [f"    a{i}: &a{i} {collection([f'*a{i - 1}'] * 9)}" for i in range(1, levels)]
    return "astuner:\n  verl:\n" + "\n".join(lines) + "\n"


def test_the_billion_laughs_file_is_refused_fast_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(9), encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert time.monotonic() - started < 5  # the size is counted on the node graph, never built
    message = str(err.value)
    assert f"Config file '{path}'" in message
    assert "aliases (*name) repeat values until the config holds more than 100,000 values" in message
    assert "write the values out, or use fewer and less nested aliases" in message


def test_config_show_of_a_mapping_bomb_is_one_paragraph_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(6, mapping=True), encoding="utf-8")  # 531,441 values
    result = run_astuner("config", "show", "--conf", str(path), cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "bomb.yaml" in result.stderr and "more than 100,000 values" in result.stderr


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("astuner:\n  verl: &v\n    actor: {again: *v}\n", encoding="utf-8")
    refused = r"loop.yaml': the alias of the value anchored at line 2 .*never ends"
    with pytest.raises(ConfigError, match=refused):
        load_config(path, environ={})


def test_nesting_past_a_hundred_levels_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("astuner:\n  verl:\n    x: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"deep.yaml' nests values more than 100 levels deep \(line 3\)"):
        load_config(path, environ={})
    # aliases can stack depth too: each anchor nests the one before
    chained = ["astuner:", "  verl:", "    a0: &a0 " + "[" * 60 + "1" + "]" * 60]
    chained.append("    a1: &a1 " + "[" * 60 + "*a0" + "]" * 60)
    path.write_text("\n".join(chained) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"deep.yaml' nests values more than 100 levels deep"):
        load_config(path, environ={})


def test_a_bomb_in_an_override_value_names_the_override(tmp_path: Path) -> None:
    value = "[" + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}" if i else "1"] * 9) + "]" for i in range(9))
    with pytest.raises(ConfigError, match=r"The override 'verl.x=\[&a0 .*more than 100,000 values"):
        load_config(None, [f"verl.x={value}]"], environ={})


def test_ordinary_anchors_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "astuner:\n"
        "  rollout: &r {temperature: 0.5}\n"
        "  verl:\n"
        "    actor: &opt {lr: 0.001, betas: [0.9, 0.99]}\n"
        "    critic: *opt\n"
        "    ref: {<<: *opt, lr: 0.01}\n",
        encoding="utf-8",
    )
    config = load_config(path, environ={})
    assert config.rollout.temperature == 0.5
    assert config.verl["critic"] == {"lr": 0.001, "betas": [0.9, 0.99]}
    assert config.verl["ref"] == {"lr": 0.01, "betas": [0.9, 0.99]}
