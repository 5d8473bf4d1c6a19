"""A judge package installs and judges without an engine package (kernel + judge-math alone)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from astuner.components import build_judge
from astuner.config import load_config
from astuner.core.task import Task, WorkflowOutput
from astuner.errors import ConfigError
from astuner.plugins import Plugins

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"
TASK = Task(task_id="t", main_query="What is 6 * 7?", metadata={"answer": "#### 42"})


def test_the_package_needs_no_engine_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    assert not [dep for dep in project["dependencies"] if dep.startswith("astuner-engine-")]
    assert project["optional-dependencies"]["openai"] == ["astuner-engine-openai"]


@pytest.fixture
def judge_math_alone(monkeypatch: pytest.MonkeyPatch) -> Plugins:
    """Every plugin but judge-math left out, and astuner-engine-openai not importable."""
    monkeypatch.setitem(sys.modules, "astuner_engine_openai", None)
    monkeypatch.setenv("ASTUNER_LOAD_PLUGINS", "judge_math")
    plugins = Plugins()
    assert "openai" not in plugins.registry("engine")
    return plugins


def test_the_rule_judge_works_without_engine_openai(judge_math_alone: Plugins, write_config) -> None:
    config = load_config(write_config({"task_judge": {"judge_protocol": "math_answer"}}), environ={})
    judge = build_judge(config, judge_math_alone)
    assert asyncio.run(judge.judge(TASK, WorkflowOutput(response="6 * 7 = 42\n#### 42"))).reward == 1.0
    assert asyncio.run(judge.judge(TASK, WorkflowOutput(response="#### 41"))).reward == 0.0


def test_the_llm_judge_without_its_engine_names_the_package_when_built(
    judge_math_alone: Plugins, write_config
) -> None:
    block = {"judge_protocol": "math_answer_llm", "alien_llm_model": "judge-model"}
    config = load_config(write_config({"task_judge": block}), environ={})
    with pytest.raises(ConfigError) as caught:
        build_judge(config, judge_math_alone)
    message = str(caught.value)
    assert "task_judge.math_answer_llm.engine" in message
    assert "`pip install astuner-engine-openai`" in message and "astuner-judge-math[openai]" in message
