"""The judge on a fresh plugin manager: the kernel's defaults and this plugin, nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from astuner.api import Judge, JudgeOutput, Task, WorkflowOutput
from astuner.training import Plugins
from pydantic import ValidationError

import astuner_NAME as plugin

JUDGE = "NAME"  # the name the plugin registers its judge under


@pytest.fixture
def registered(plugins: Plugins) -> Plugins:
    """astuner's `plugins` fixture (a fresh plugin manager) with this plugin added, as an install would."""
    plugins.add(plugin, name="NAME")  # the name of its entry point
    return plugins


def build(plugins: Plugins, **settings: Any) -> Judge:
    """The judge as a run builds it from its block `task_judge.NAME`."""
    registration = plugins.get("judge", JUDGE)
    return registration.build(registration.settings(**settings))


def verdict(plugins: Plugins, answer: object, response: str, **settings: Any) -> JudgeOutput:
    task = Task(task_id="t1", main_query="What is six times seven?", metadata={"answer": answer})
    return asyncio.run(build(plugins, **settings).judge(task, WorkflowOutput(response=response)))


def test_the_plugin_provides_its_judge(registered: Plugins) -> None:
    (info,) = [info for info in registered.infos() if info.name == "NAME"]
    assert info.status == "ok" and info.provides == [f"judge:{JUDGE}"]
    assert registered.get("judge", JUDGE).settings is plugin.ContainsAnswerSettings


def test_a_response_that_states_the_answer_is_rewarded(registered: Plugins) -> None:
    result = verdict(registered, 42, "Six times seven is 42.")
    assert result.reward == 1.0 and result.is_success


def test_the_answer_must_stand_as_a_word(registered: Plugins) -> None:
    assert verdict(registered, 42, "I think it is 420.").reward == 0.0


def test_a_final_answer_in_metadata_is_judged_before_the_response(registered: Plugins) -> None:
    judge = build(registered)
    task = Task(task_id="t1", metadata={"answer": "Paris"})
    output = WorkflowOutput(response="Paris? No.", metadata={"final_answer": "Lyon"})
    assert asyncio.run(judge.judge(task, output)).reward == 0.0


def test_settings_change_the_field_case_and_rewards(registered: Plugins) -> None:
    assert verdict(registered, "Paris", "it is paris").is_success
    assert not verdict(registered, "Paris", "it is paris", case_sensitive=True).is_success
    wrong = verdict(registered, "Paris", "Lyon", reward_correct=2.0, reward_wrong=-1.0)
    assert wrong.reward == -1.0 and not wrong.is_success


def test_no_reference_is_a_wrong_answer_and_counted(registered: Plugins) -> None:
    result = verdict(registered, "x", "x", answer_field="solution")
    assert result.reward == 0.0 and result.metrics == {"judge/no_answer": 1.0}
    answered = verdict(registered, "Paris", "Lyon")
    assert answered.metrics == {"judge/no_answer": 0.0}


def test_a_misspelled_setting_is_refused(registered: Plugins) -> None:
    with pytest.raises(ValidationError, match="reward_corect"):
        build(registered, reward_corect=2.0)
