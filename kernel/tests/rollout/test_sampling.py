"""Sampling settings: built from the config in one place, overridden per call, recorded on every call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from astuner.config import load_config
from astuner.core.merge import merge_calls
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.core.trajectory import CallSampling, LLMCall, Trajectory
from astuner.errors import AstunerError
from astuner.rollout.engine import ChatReply, Generation, SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.sampling import auxiliary_sampling, sampling_from_config
from astuner.testing.engines import ScriptedEngine

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


class RecordingEngine(ScriptedEngine):
    """A scripted engine that keeps the sampling settings of every request it gets."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        super().__init__(tokenizer, lambda prompt: "The answer is 5.")
        self.seen: list[SamplingParams] = []

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        self.seen.append(sampling)
        return await super().generate(prompt_ids, sampling)


def make_tuner(tokenizer: ChatTokenizer, max_response: int = 64) -> tuple[ModelTuner, RecordingEngine]:
    engine = RecordingEngine(tokenizer)
    tracker = ContextTracker(tokenizer, TrackerSettings(max_response_length_in_one_turn=max_response))
    sampling = SamplingParams(temperature=0.9, top_p=0.95, top_k=-1, max_tokens=64)
    return ModelTuner(rollout_id="r", engine=engine, sampling=sampling, tracker=tracker), engine


# ------------------------------------------------------------------ the builder


def test_training_validation_and_auxiliary_sampling_come_from_their_config_sections() -> None:
    config = load_config(
        None,
        [
            "rollout.temperature=0.7",
            "rollout.top_p=0.8",
            "rollout.top_k=20",
            "rollout.max_response_length_in_one_turn=99",
            "rollout.val_kwargs.temperature=0.3",
            "auxiliary_models.critic.path=critic-model",
            "auxiliary_models.critic.temperature=0.2",
            "auxiliary_models.critic.max_tokens=11",
        ],
    )
    assert sampling_from_config(config.rollout) == SamplingParams(0.7, 0.8, 20, 99)
    assert sampling_from_config(config.rollout, validation=True).greedy  # val_kwargs.do_sample is off
    assert auxiliary_sampling(config.auxiliary_models["critic"]) == SamplingParams(0.2, 1.0, -1, 11)


def test_an_override_changes_only_what_it_names_and_none_keeps_the_setting() -> None:
    base = SamplingParams(0.9, 0.95, -1, 64)
    assert base.override() is base
    assert base.override(temperature=None, top_k=None) is base
    assert base.override(temperature=0.5, top_k=8) == SamplingParams(0.5, 0.95, 8, 64)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -5}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"seed": "7"}, "seed"),
        ({"temprature": 0.5}, "temprature"),
    ],
)
def test_a_bad_override_is_an_error_naming_the_setting(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(AstunerError, match=named):
        SamplingParams().override(**changes)


# ------------------------------------------------------------ what calls record


def test_each_call_records_what_the_engine_was_given(qwen25: ChatTokenizer) -> None:
    tuner, engine = make_tuner(qwen25)

    async def main() -> list[LLMCall]:
        first = await tuner.chat(QUESTION, temperature=0.5)
        second = await tuner.chat(QUESTION, temperature=1.5, top_p=0.5, top_k=4, max_tokens=8)
        third = await tuner.chat(QUESTION)
        return [first, second, third]

    calls = asyncio.run(main())
    assert [c.sampling for c in calls] == [s.record() for s in engine.seen]
    assert calls[0].sampling == CallSampling(temperature=0.5, top_p=0.95, top_k=-1, max_tokens=64)
    assert calls[1].sampling == CallSampling(temperature=1.5, top_p=0.5, top_k=4, max_tokens=8)
    assert calls[2].sampling == CallSampling(temperature=0.9, top_p=0.95, top_k=-1, max_tokens=64)


def test_the_recorded_token_budget_is_the_one_the_engine_was_given(qwen25: ChatTokenizer) -> None:
    tuner, engine = make_tuner(qwen25, max_response=16)
    call = asyncio.run(tuner.chat(QUESTION, max_tokens=40))
    # The tracker's per-turn limit lowers the call's 40 tokens.
    assert call.sampling is not None and call.sampling.max_tokens == engine.seen[0].max_tokens == 16


def test_an_engine_that_reports_its_own_sampling_is_recorded_as_it_says(qwen25: ChatTokenizer) -> None:
    class Clamping(RecordingEngine):
        async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
            out = await super().generate(prompt_ids, sampling)
            return out._replace(sampling=sampling.override(top_k=50))

    tuner, _ = make_tuner(qwen25)
    tuner.engine = Clamping(qwen25)
    call = asyncio.run(tuner.chat(QUESTION))
    assert call.sampling is not None and call.sampling.top_k == 50


def test_a_text_only_call_records_its_sampling_too() -> None:
    class Chat:
        async def chat(self, messages: Any, tools: Any, sampling: SamplingParams) -> ChatReply:
            return ChatReply(content="5")

    tuner = ModelTuner(rollout_id="r", engine=Chat(), sampling=SamplingParams(temperature=0.9))
    call = asyncio.run(tuner.chat(QUESTION, temperature=0.0))
    assert call.sampling is not None and call.sampling.temperature == 0.0
    assert call.sampling.logprob_temperature == 1.0


def test_gateway_requests_override_the_sampling_and_the_call_records_it(qwen25: ChatTokenizer) -> None:
    tuner, engine = make_tuner(qwen25)

    async def main() -> list[httpx.Response]:
        async with Gateway() as gateway:
            tuner.gateway_url = gateway.url
            gateway.register(tuner)
            async with httpx.AsyncClient(base_url=tuner.openai_base_url) as http:
                body = {"messages": QUESTION}
                return [
                    await http.post("/chat/completions", json=body),
                    await http.post(
                        "/chat/completions",
                        json={**body, "temperature": 1.5, "top_p": 0.5, "top_k": 20, "max_tokens": 500},
                    ),
                    await http.post("/chat/completions", json={**body, "top_k": -5}),
                ]

    plain, overridden, bad = asyncio.run(main())
    assert plain.status_code == overridden.status_code == 200
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_k"
    assert len(engine.seen) == 2  # the bad request never reached the engine
    first, second = tuner.calls
    assert first.sampling == CallSampling(temperature=0.9, top_p=0.95, top_k=-1, max_tokens=64)
    # The token limit of a request is capped by the rollout's.
    assert second.sampling == CallSampling(temperature=1.5, top_p=0.5, top_k=20, max_tokens=64)


# ----------------------------------------------------------------- the records


def test_the_sampling_survives_the_rollout_log_and_reaches_the_samples(qwen25: ChatTokenizer) -> None:
    tuner, _ = make_tuner(qwen25)

    async def main() -> None:
        first = await tuner.chat(QUESTION, temperature=0.5)
        follow_up = [*QUESTION, {"role": "assistant", "content": first.content}]
        await tuner.chat([*follow_up, {"role": "user", "content": "Sure?"}], temperature=1.5)

    asyncio.run(main())
    line = tuner.trajectory().model_dump_json()
    loaded = Trajectory.model_validate_json(line)
    assert [c.sampling.temperature for c in loaded.calls if c.sampling] == [0.5, 1.5]
    (sample,), _ = merge_calls(loaded.calls)
    assert len(sample.response_spans) == 2
    assert [s.temperature for s in sample.response_sampling if s] == [0.5, 1.5]


def test_records_written_before_sampling_was_kept_still_load() -> None:
    old = '{"trajectory_id": "t", "calls": [{"prompt_ids": [1, 2], "response_ids": [3], "trainable": true}]}'
    trajectory = Trajectory.model_validate_json(old)
    assert trajectory.calls[0].sampling is None
    (sample,), _ = merge_calls(trajectory.calls)
    assert sample.response_sampling == [None]


def test_an_agentscope_model_call_applies_its_sampling_options(qwen25: ChatTokenizer) -> None:
    pytest.importorskip("agentscope")
    from astuner.rollout.agentscope_model import installed_agentscope_model_tuner_class

    tuner, engine = make_tuner(qwen25)
    model = installed_agentscope_model_tuner_class()(
        rollout_id="r", engine=engine, sampling=tuner.sampling, tracker=tuner.tracker
    )
    asyncio.run(model(QUESTION, temperature=0.3, stream=False))
    (call,) = model.calls
    assert call.sampling is not None and call.sampling.temperature == 0.3
