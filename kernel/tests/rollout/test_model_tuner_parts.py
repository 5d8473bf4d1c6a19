"""The model handle composes its concerns (chat, environment, judge input, OpenAI clients) for one rollout.

Every agent view of a rollout's handle (`for_agent`) acts on the same
record: its calls, its environment's steps and what it hands to the judge.
"""

import asyncio
from typing import Any

import httpx
import pytest

from astuner.errors import AstunerError
from astuner.rollout.engine import ChatReply, SamplingParams
from astuner.rollout.model_tuner import ModelTuner


class EchoChat:
    """A chat engine that answers every call with the last message's content."""

    async def chat(self, messages: Any, tools: Any, sampling: SamplingParams) -> ChatReply:
        return ChatReply(content=f"echo {messages[-1]['content']}")


class CountingEnv:
    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        return "obs", 2.0, action == "stop", {}


def handle(**options: Any) -> ModelTuner:
    return ModelTuner(rollout_id="r-1", engine=EchoChat(), sampling=SamplingParams(max_tokens=8), **options)


def test_agent_views_share_the_calls_steps_and_judge_input_of_their_rollout() -> None:
    tuner = handle()
    tuner.gym_env = CountingEnv()
    view = tuner.for_agent("critic")
    asyncio.run(tuner.chat([{"role": "user", "content": "a"}]))
    asyncio.run(view.chat([{"role": "user", "content": "b"}]))
    view.gym_step("go")
    tuner.gym_step("stop")
    view.update_judge_input_dictionary(final_answer="42")
    assert [(c.index, c.agent_name, c.content) for c in tuner.calls] == [
        (0, "default", "echo a"),
        (1, "critic", "echo b"),
    ]
    assert tuner.step_rewards == [2.0, 2.0] and view.env_steps is tuner.env_steps
    assert [s["terminated"] for s in tuner.env_steps] == [False, True]
    assert all(s["call_index"] == 1 for s in tuner.env_steps)
    assert tuner.get_judge_input_dictionary() == {"final_answer": "42"} == tuner.judge_input
    tuner.get_judge_input_dictionary()["final_answer"] = "changed"
    assert tuner.judge_input == {"final_answer": "42"}


def test_a_step_without_an_environment_says_which_reader_gives_one() -> None:
    with pytest.raises(AstunerError, match="env_service"):
        handle().gym_step("go")


def test_the_openai_base_url_names_rollout_and_agent_and_needs_a_gateway() -> None:
    tuner = handle(gateway_url="http://127.0.0.1:9")
    assert tuner.for_agent("critic").openai_base_url == "http://127.0.0.1:9/rollout/r-1/critic/v1"
    with pytest.raises(AstunerError, match="no gateway"):
        _ = handle().openai_base_url


def test_aclose_closes_the_http_clients_it_made_and_leaves_a_given_one_open() -> None:
    pytest.importorskip("openai")
    tuner = handle(gateway_url="http://127.0.0.1:9")

    async def scenario() -> tuple[Any, httpx.AsyncClient]:
        made = tuner.for_agent("critic").openai_client()
        given = httpx.AsyncClient()
        tuner.openai_client(http_client=given)
        await tuner.aclose()
        return made, given

    made, given = asyncio.run(scenario())
    assert made._client.is_closed and not given.is_closed
    asyncio.run(given.aclose())
