"""The Trinity keys astuner gives its own defaults: written in the `trinity:` block, checked first.

The tutorials' `rollout.n_vllm_engine` (and
`trainer_common.trinity_only__n_vllm_engine`) is read as
`trinity.explorer.rollout_model.engine_num` by `astuner.compat`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from astuner.training import AstunerConfig, engine_settings


class TrinitySettings(BaseModel):
    """astuner's defaults for Trinity keys that astuner also reads; each field is a Trinity key."""

    engine_num: int = Field(
        1,
        ge=1,
        alias="explorer.rollout_model.engine_num",
        description="vLLM engines; the rollout workers (rollout.max_env_worker) are shared among them.",
    )


def trinity_settings(config: AstunerConfig) -> TrinitySettings:
    """The `trinity:` block's values of these keys, else astuner's defaults."""
    return engine_settings(TrinitySettings, config.trinity, "trinity")


def trinity_defaults(config: AstunerConfig) -> dict[str, Any]:
    """These keys as Trinity keys (dotted) -> value."""
    return trinity_settings(config).model_dump(by_alias=True)
