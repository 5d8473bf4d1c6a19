"""A context that leaves no room for a prompt beside the reply budget is a config error, not a silent run.

Every model call reserves `rollout.max_response_length_in_one_turn` tokens
of `rollout.max_model_len` for its reply and is sent only if its prompt fits
in the rest; a context no longer than the budget would end every call with
`context_overflow` and 0 tokens.
"""

from __future__ import annotations

import pytest

from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.tuner import TunerModelConfig, tune_config

BOTH_KEYS = ("rollout.max_model_len", "rollout.max_response_length_in_one_turn")


async def answer(task: object, model: object, auxiliary_models: object = None) -> str:
    return "5"


def test_a_context_no_longer_than_the_reply_budget_is_an_error_naming_both_keys(write_config) -> None:
    path = write_config({"rollout": {"max_model_len": 1024}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert all(key in message for key in BOTH_KEYS), message
    assert f"config file '{path}' (line " in message  # where the value was written
    assert "(4096)" in message and "context_overflow" in message and "\n" not in message


@pytest.mark.parametrize(
    ("overrides", "loads"),
    [
        (["rollout.max_model_len=4096"], False),  # the budget exactly: no token left for a prompt
        (["rollout.max_response_length_in_one_turn=20000"], False),  # over the default context
        (["rollout.max_model_len=4097"], True),
        (["rollout.max_model_len=1024", "rollout.max_response_length_in_one_turn=256"], True),
    ],
)
def test_the_check_compares_the_two_keys_wherever_they_come_from(overrides: list[str], loads: bool) -> None:
    if loads:
        load_config(None, overrides, environ={})
        return
    with pytest.raises(ConfigError, match="leaves no room for a prompt") as caught:
        load_config(None, overrides, environ={})
    assert all(key in str(caught.value) for key in BOTH_KEYS)


def test_tune_names_its_own_arguments_too() -> None:
    """TunerModelConfig's max_tokens defaults to 8192 (the AgentScope Tuner's): a 4096 context needs less."""
    with pytest.raises(ConfigError) as caught:
        tune_config(workflow_func=answer, model=TunerModelConfig(model_path="m", max_model_len=4096))
    assert "(8192)" in str(caught.value) and "TunerModelConfig's max_model_len and max_tokens" in str(
        caught.value
    )
    config = tune_config(
        workflow_func=answer, model=TunerModelConfig(model_path="m", max_model_len=4096, max_tokens=512)
    )
    assert (config.rollout.max_model_len, config.rollout.max_response_length_in_one_turn) == (4096, 512)
