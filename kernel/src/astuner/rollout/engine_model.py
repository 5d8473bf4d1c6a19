"""What an engine serves: one model, where it is, and how long its contexts and replies may be.

An engine factory receives an `EngineModel` instead of the run's config, so
that a second engine (an auxiliary model, an LLM judge's) is built from its
own values, never from a forged copy of the main model's config. The kernel
makes the main model's from `model.path`, `rollout.*` and
`trainer_common.seed`, an auxiliary model's from its `auxiliary_models.<name>`
entry (`astuner.components`); a judge makes its own from its settings.

`adapters` are fixed per-agent LoRA adapters on the main model: each
`agents.<name>.lora.path` the config sets, so that outside a training loop
(`astuner eval`, backbone debug) an agent's calls still generate with its
adapter. An engine that loads its own weights (`transformers`) serves them;
the others cannot, and the rollout runner warns naming the keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineModel(BaseModel):
    """The model one engine serves.

    `path` is a HuggingFace id or folder (the served model's name for a
    remote endpoint); `url` an already running server for it (None: the
    engine starts or loads one itself); `max_model_len` the most tokens in
    one context (prompt plus reply); `max_tokens` the most tokens one reply
    (one turn) may have; `tensor_parallel_size` how many devices a started
    server splits the model over; `seed` what a started server samples from;
    `adapters` the folder of each agent's fixed LoRA adapter, by agent name
    (the adapter is served under that name; empty: the model alone).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1)
    url: str | None = None
    max_model_len: int = Field(18000, ge=1)
    max_tokens: int = Field(4096, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    seed: int = 42
    adapters: dict[str, str] = Field(default_factory=dict)
