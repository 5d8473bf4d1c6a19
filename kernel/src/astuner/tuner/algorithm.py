"""`AlgorithmConfig`: the RL algorithm and its step sizes, as the AgentScope Tuner names them.

| field | config key |
|---|---|
| `algorithm_type` | `trainer_common.algorithm.adv_estimator` (`multi_step_grpo`, an alias of `grpo`) |
| `learning_rate` | `trainer_common.optim.lr` |
| `group_size` | `rollout.num_repeat` (runs per task, one group) |
| `batch_size` | `data.train_batch_size` (tasks per step) |
| `save_interval_steps` | `trainer_common.save_freq` |
| `eval_interval_steps` | `trainer_common.test_freq` |
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from astuner.algorithms import algorithm_name, algorithm_names
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.tuner.settings import TunerSettings

KEYS = {
    "algorithm_type": "trainer_common.algorithm.adv_estimator",
    "learning_rate": "trainer_common.optim.lr",
    "group_size": "rollout.num_repeat",
    "batch_size": "data.train_batch_size",
    "save_interval_steps": "trainer_common.save_freq",
    "eval_interval_steps": "trainer_common.test_freq",
}


def algorithm_types(plugins: Plugins) -> list[str]:
    """Every accepted `algorithm_type`: the installed advantage estimators and their aliases (AgentScope's
    names among them)."""
    return algorithm_names(plugins, "advantage_estimator")


class AlgorithmConfig(TunerSettings):
    """How to train: algorithm, group and batch sizes, learning rate, when to save and evaluate."""

    algorithm_type: str = Field("multi_step_grpo", description="multi_step_grpo (= grpo), grpo, rloo, ...")
    learning_rate: float = Field(1e-6, gt=0, description="Optimizer learning rate.")
    group_size: int = Field(8, ge=1, description="Runs per task; advantages compare runs of one group.")
    batch_size: int = Field(32, ge=1, description="Tasks per training step.")
    save_interval_steps: int = Field(100, ge=1, description="Save a checkpoint every this many steps.")
    eval_interval_steps: int = Field(100, ge=1, description="Validate on eval_dataset every this many steps.")

    @field_validator("algorithm_type")
    @classmethod
    def _known(cls, value: str) -> str:
        # The installed plugins, as `tune()` loads them, may add estimators of their own.
        known = algorithm_types(Plugins())
        if value not in known:
            raise ConfigError(
                f"AlgorithmConfig(algorithm_type={value!r}): astuner has no such algorithm. Choose one of: "
                f"{', '.join(known)} (multi_step_grpo is grpo over whole episodes)."
            )
        return value

    def config(self, *, explicit: bool) -> dict[str, Any]:
        """The config values this object sets (see the module docstring)."""
        return self.config_values(KEYS, explicit=explicit)

    def config_value(self, name: str) -> Any:
        """`algorithm_type` as the estimator's registered name (`multi_step_grpo` is written `grpo`)."""
        if name == "algorithm_type":
            return algorithm_name(Plugins(), "advantage_estimator", self.algorithm_type)
        return super().config_value(name)
