"""`astuner config show` on the tutorials' configs written in the old spelling (seeds 000 and 001)."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_seed_000
import test_seed_001
import yaml
from seedtext import leaves, needs_seeds, sources

from astuner import compat
from astuner.config_errors import yaml_line
from astuner.testing.cli import run_astuner

pytestmark = needs_seeds


@pytest.mark.parametrize("seed", [test_seed_000, test_seed_001], ids=["seed000", "seed001"])
def test_config_show_names_the_source_of_every_old_spelling(tmp_path: Path, seed) -> None:
    path = seed.lay_out(tmp_path, 8093) if seed is test_seed_001 else seed.lay_out(tmp_path)
    result = run_astuner("config", "show", "--conf", str(path.relative_to(tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    shown = sources(result.stdout)
    written = yaml.safe_load(path.read_text())["astune"]
    checked = 0
    for key in leaves(written):
        if key in compat.RETIRED_KEYS:
            assert key not in shown  # accepted, dropped, explained in a notice
            continue
        line = yaml_line(path, ["astune", *key.split(".")])
        assert shown[compat.KEY_ALIASES.get(key, key)].startswith(f"file {path.name}:{line}"), key
        checked += 1
    assert checked >= 6
    assert "alias of astune.task_judge." in shown["task_judge.judge_protocol"]
    assert "alias of rollout.agentscope_learn_protocol" in shown["rollout.agentscope_workflow"]
