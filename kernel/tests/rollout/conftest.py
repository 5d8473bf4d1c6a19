"""Helpers for runner tests: a scripted engine behind a real runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from astuner.core.tokenizer import ChatTokenizer
from astuner.default_plugins.exact_judge import ExactJudge, ExactJudgeSettings
from astuner.rollout.runner import RolloutRunner, RunnerSettings
from astuner.rollout.workflow import adapt_workflow
from astuner.testing.engines import ScriptedEngine


@pytest.fixture
def make_runner(qwen25: ChatTokenizer) -> Callable[..., tuple[RolloutRunner, ScriptedEngine]]:
    """`make_runner(workflow, respond, **options) -> (runner, engine)` with the exact judge."""

    def make(
        workflow: Any,
        respond: Callable[[str], str],
        *,
        settings: RunnerSettings | None = None,
        madness_checks: dict[str, Any] | None = None,
        gateway: Any = None,
        delay: float = 0.0,
    ) -> tuple[RolloutRunner, ScriptedEngine]:
        engine = ScriptedEngine(qwen25, respond, delay=delay)
        runner = RolloutRunner(
            workflow=adapt_workflow(workflow, "test workflow"),
            judge=ExactJudge(ExactJudgeSettings()),
            engine=engine,
            tokenizer=qwen25,
            settings=settings,
            madness_checks=madness_checks,
            gateway=gateway,
        )
        return runner, engine

    return make
