"""Samples for a trainer that recomputes log-probs at one temperature (verl, Trinity)."""

from __future__ import annotations

from astuner.core.merge import merge_calls
from astuner.core.one_temperature import other_temperature_warning, untrain_other_temperatures
from astuner.core.trajectory import CallSampling, LLMCall


def _conversation(*samplings: CallSampling | None) -> list[LLMCall]:
    """Calls that each extend the last one by two generated tokens after a tool token (one sample)."""
    calls, prompt = [], [1, 2]
    for index, sampling in enumerate(samplings):
        response = [10 + 2 * index, 11 + 2 * index]
        calls.append(
            LLMCall(
                index=index,
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=[-0.5] * 2,
                sampling=sampling,
            )
        )
        prompt = [*prompt, *response, 3]
    return calls


def test_spans_sampled_at_another_temperature_lose_their_mask_and_nothing_else() -> None:
    at, other = CallSampling(temperature=0.7), CallSampling(temperature=1.2, top_p=0.5)
    (sample,), _ = merge_calls(_conversation(at, other, None, CallSampling(temperature=0.7, top_k=5)))
    assert sample.loss_mask == [0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1]
    untrained, asked = untrain_other_temperatures(sample, 0.7)
    # the second call only: an older record without sampling and other top-p/top-k values still train
    assert asked == [1.2]
    assert untrained.loss_mask == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1]
    assert untrained.input_ids == sample.input_ids and untrained.old_logprobs == sample.old_logprobs
    assert sample.loss_mask[5:7] == [1, 1]  # the sample given is left as it is


def test_a_greedy_call_has_its_log_probs_at_temperature_one() -> None:
    (sample,), _ = merge_calls(_conversation(CallSampling(temperature=0.0)))
    assert untrain_other_temperatures(sample, 1.0) == (sample, [])
    assert untrain_other_temperatures(sample, 0.7)[1] == [0.0]


def test_the_warning_names_the_trainer_setting_the_temperatures_and_the_way_out() -> None:
    message = other_temperature_warning("verl", "actor_rollout_ref.rollout.temperature", 1.0, [0.3, 0.3], "X")
    assert message.startswith("2 model calls of this rollout asked for temperature 0.3, but verl's trainer")
    assert "actor_rollout_ref.rollout.temperature = 1:" in message
    assert "count is in X" in message and "use backbone torch" in message
