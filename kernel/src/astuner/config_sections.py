"""The settings models of the `astuner:` block's sections: `model`, `rollout`, `trainer_common`, ...

`AstunerConfig` (in `astuner.config`) holds one of each; every section
rejects keys it does not know, except the plugin sections, whose sub-blocks
belong to the plugins (validated by `astuner.components`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class Section(BaseModel):
    """A config block whose keys are all known: anything else is an error."""

    model_config = ConfigDict(extra="forbid")


class PluginSection(Section):
    """A block that also holds plugin sub-blocks, validated when the plugin is used."""

    model_config = ConfigDict(extra="allow")


class LoraConfig(Section):
    rank: int = Field(0, ge=0, description="LoRA rank; 0 trains all weights (no LoRA).")
    alpha: float = Field(16.0, gt=0, description="LoRA scaling numerator: updates are scaled by alpha/rank.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: str | list[str] = Field(
        "all-linear", description="Module names to adapt, or all-linear (every linear layer but the head)."
    )


class AgentLoraConfig(LoraConfig):
    """`agents.<name>.lora`: one agent's own LoRA adapter on the shared, frozen base model."""

    rank: int = Field(8, ge=1, description="LoRA rank of this agent's adapter.")
    path: str | None = Field(
        None,
        description="A saved adapter folder: where this agent's adapter starts when it trains, the "
        "fixed adapter it generates with when it is not in trainable_targets, and the adapter it "
        "generates with outside training (astuner eval, backbone debug; engine transformers).",
    )


class AgentConfig(Section):
    """One entry of `agents`: how one agent (a role of a multi-agent workflow) generates and trains."""

    lora: AgentLoraConfig | None = Field(
        None,
        description="Give this agent an adapter of its own (backbone torch): its calls generate with it "
        "and, when it trains, update only it.",
    )


class ModelConfig(Section):
    path: str = Field(
        "builtin:smollm2-135m-instruct",
        description="HuggingFace repo id, local folder, .gguf file, or builtin:<name>.",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters (backbone torch).")
    tool_format: Literal["auto", "template", "hermes"] = Field(
        "auto",
        description="How tools reach the model: template (the chat template's own way), hermes "
        "(astuner writes them into the messages, <tool_call> replies), or auto (template when it "
        "renders tools, else hermes).",
    )
    tool_demonstration: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Worked example exchanges (OpenAI messages: question, tool call, result, answer; "
        "one or more) shown after the system turn when the agent passes tools.",
    )

    @field_validator("tool_demonstration")
    @classmethod
    def _demonstration_messages(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, message in enumerate(value):
            if message.get("role") not in ("system", "user", "assistant", "tool"):
                raise ValueError(
                    f"message {i} has role {message.get('role')!r}; use user, assistant or tool "
                    "(OpenAI messages: a question, an assistant turn with tool_calls, the tool's "
                    "result, the answer)"
                )
        return value


class DataConfig(Section):
    train_batch_size: int = Field(32, ge=1, description="Tasks per training step.")
    max_prompt_length: int = Field(3000, ge=1)
    max_response_length: int = Field(15000, ge=1)


class MultiTurnConfig(Section):
    max_steps: int = Field(30, ge=1, description="Most agent/environment turns per episode.")
    expected_steps: int = Field(1, ge=1, description="Used to size engine batches.")


class ValKwargs(Section):
    temperature: float = Field(0.0, ge=0)
    top_k: int = -1
    top_p: float = Field(1.0, gt=0, le=1)
    do_sample: bool = False
    num_repeat: int = Field(1, ge=1)


class RolloutConfig(Section):
    agentscope_workflow: str | None = Field(
        None, description="The workflow: a registered name or an import string 'pkg.mod->Name'."
    )
    disable_toolcalls: bool = Field(
        False, description="Show the model no tools and read no tool calls from its replies."
    )
    engine: str = Field("auto", description="Inference engine name, or auto.")
    engine_url: str | None = Field(None, description="URL of an already running engine server.")
    engines: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Engine settings.")
    num_repeat: int = Field(4, ge=1, description="Rollouts per task; they form one group.")
    temperature: float = Field(0.9, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    max_env_worker: int = Field(
        32,
        ge=1,
        description="Rollouts running at once, over every batch of the run under way together (the "
        "batches ahead of asynchronous rollouts, a validation meanwhile).",
    )
    executor: str = Field(
        "local",
        description="Where workflows run: 'local' (in the runner's process), an installed executor (e.g. "
        "'ray' of astuner-executor-ray: as Ray tasks, model calls coming back through the gateway), or an "
        "import string.",
    )
    rollout_timeout: float = Field(1800.0, gt=0, description="Seconds before a rollout is cut.")
    gamma: float = Field(1.0, ge=0, le=1)
    trainable_targets: list[str] = Field(
        default_factory=list,
        description="Agents whose calls train; empty: the workflow's trainable_targets (empty there too: "
        "every agent, or, with agents.<name>.lora, every agent that has an adapter).",
    )
    compute_madness_checklist: list[str] = Field(default_factory=lambda: ["nonsense"])
    madness: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Check settings.")
    agent_madness_termination: bool = True
    agent_madness_reward: float = Field(-1.0, allow_inf_nan=False)
    max_response_length_in_one_turn: int = Field(4096, ge=1)
    max_model_len: int = Field(18000, ge=1, validate_default=True)
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig)
    val_kwargs: ValKwargs = Field(default_factory=ValKwargs)
    tensor_model_parallel_size: int = Field(1, ge=1)

    @field_validator("max_model_len")
    @classmethod
    def _room_for_a_prompt(cls, max_model_len: int, info: ValidationInfo) -> int:
        # A call is sent only if its prompt plus the whole reply budget fits (the context tracker's
        # rule), so no clamp could make such a context work: every call would end context_overflow.
        budget = info.data.get("max_response_length_in_one_turn")
        if budget is not None and budget >= max_model_len:
            raise PydanticCustomError(
                "no_room_for_prompt",
                "it leaves no room for a prompt: every model call reserves "
                "rollout.max_response_length_in_one_turn ({budget}) of these tokens for its reply, so "
                "each would stop with context_overflow before generating anything. Set "
                "rollout.max_model_len to that budget plus room for the longest prompt, or lower "
                "rollout.max_response_length_in_one_turn well below {max_model_len} (in tune(): "
                "TunerModelConfig's max_model_len and max_tokens)",
                {"budget": budget, "max_model_len": max_model_len},
            )
        return max_model_len


class TaskReaderConfig(PluginSection):
    type: str = Field("arith", description="Reader name, or an import string.")


class TaskJudgeConfig(PluginSection):
    judge_protocol: str = Field("exact", description="Judge name, or an import string.")
    alien_llm_model: str | None = None
    alien_llm_response_length: int = Field(512, ge=1)


class RolloutCorrectionConfig(Section):
    """Correcting for an engine that samples from slightly other numbers than the trainer computes
    (another dtype, kernels or engine); the names are verl's `algorithm.rollout_correction`."""

    rollout_is: Literal["token", "sequence"] | None = Field(
        None,
        description="Truncated importance sampling: weight each token's loss (token) or each sample's "
        "(sequence) by min(trainer prob / engine prob, rollout_is_threshold). Off: PPO's ratio is taken "
        "against the engine's log-probs.",
    )
    rollout_is_threshold: float = Field(2.0, gt=0, description="The cap of an importance weight.")


# How a step's per-token losses reduce to one number (`trainer_common.loss_agg_mode`).
LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


class AlgorithmConfig(Section):
    adv_estimator: str = Field(
        "grpo", description="Advantage estimator: a name registered by a plugin (`astuner plugins list`)."
    )
    policy_loss: str = Field(
        "ppo_clip",
        description="Policy loss: ppo_clip, dapo, gspo, cispo, or one a plugin registers. Its defaults fill "
        "trainer_common.clip_ratio_low, clip_ratio_high and loss_agg_mode where they are unset.",
    )
    policy_loss_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of the chosen policy loss, checked against the ones it declares.",
    )
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)


class OptimConfig(Section):
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    lr_warmup_steps: int = Field(0, ge=0, description="Steps of linear warm-up from 0 to lr; then constant.")


class TrainerCommonConfig(Section):
    total_epochs: int = Field(50, ge=1)
    total_training_steps: int | None = Field(None, ge=1, description="Overrides epochs when set.")
    val_before_train: bool = False
    val_pass_n: int = Field(4, ge=1)
    save_freq: int = Field(20, ge=1)
    test_freq: int = Field(20, ge=1)
    nnodes: int = Field(1, ge=1)
    n_gpus_per_node: int = Field(8, ge=0)
    logger: list[str] = Field(default_factory=lambda: ["console", "tensorboard"])
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    mini_batch_num: int = Field(1, ge=1)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    use_kl_loss: bool = True
    kl_loss_coef: float = Field(0.002, ge=0)
    kl_loss_type: str = Field("low_var_kl", description="kl, abs, mse or low_var_kl.")
    loss_agg_mode: LossAggMode | None = Field(
        None,
        description="How per-token losses reduce to the step loss; unset: the policy loss's default "
        "(token-mean for ppo_clip).",
    )
    clip_ratio_low: float | None = Field(
        None,
        ge=0,
        description="Ratio floor is 1 - clip_ratio_low; unset: the policy loss's default (0.2 for ppo_clip).",
    )
    clip_ratio_high: float | None = Field(
        None,
        ge=0,
        description="Ratio ceiling is 1 + clip_ratio_high; unset: the policy loss's default "
        "(0.2 for ppo_clip).",
    )
    grad_clip: float = Field(1.0, gt=0, description="Gradient norm clipping threshold.")
    max_token_len_per_gpu: int = Field(
        4096,
        ge=1,
        description="Token budget of one micro-batch (rows x longest row); activation memory grows with "
        "it (SmolLM2-135M: about 1.5 MB per token on CPU). Raise it on a large GPU.",
    )
    ulysses_sequence_parallel_size: int = Field(1, ge=1)
    resume: str = Field("disable", description="disable, auto, or a checkpoint folder.")
    keep_last_checkpoints: int | None = Field(
        None, ge=1, description="Keep the newest N checkpoints of a run (backbone torch); None keeps all."
    )
    seed: int = 42
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous rollouts (backbone torch): with N > 0 the rollouts of the next steps "
        "run while the current update trains, sampled by weights at most N updates old, and the update "
        "corrects for that with algorithm.rollout_correction.rollout_is (required). 0: synchronous, "
        "each step's rollouts use the newest weights.",
    )

    @field_validator("max_staleness")
    @classmethod
    def _staleness_is_corrected(cls, max_staleness: int, info: ValidationInfo) -> int:
        # Stale samples come from an older policy than the one trained: without importance weights
        # the update would treat them as on-policy, and its ratio would hide the gap.
        algorithm = info.data.get("algorithm")
        if max_staleness > 0 and algorithm is not None and algorithm.rollout_correction.rollout_is is None:
            raise PydanticCustomError(
                "staleness_without_correction",
                "trainer_common.max_staleness {max_staleness} trains on samples from weights up to "
                "{max_staleness} updates old, which needs a correction for the older policy: set "
                "trainer_common.algorithm.rollout_correction.rollout_is to token (or sequence), or set "
                "trainer_common.max_staleness to 0 (synchronous)",
                {"max_staleness": max_staleness},
            )
        return max_staleness

    @field_validator("logger", mode="before")
    @classmethod
    def _logger_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ContextTrackerConfig(Section):
    mode: Literal["cumulative", "template"] = "cumulative"
    max_env_len: int = Field(4096, ge=1, description="Tool/environment outputs are clipped here.")
    tool_parser: str = Field("hermes", description="How tool calls are read from generated text.")


class AuxiliaryModelConfig(Section):
    """One entry of `auxiliary_models`: a model the workflow and judge call but that is never trained.

    Its engine is chosen and configured as the main one is (`rollout.engine`,
    `rollout.engine_url`, `rollout.engines`), and built once per run.
    """

    path: str = Field(
        description="HuggingFace repo id, local folder, .gguf file or builtin:<name>; for engine openai "
        "(or a vLLM server at engine_url) the served model's name."
    )
    engine: str = Field(
        "auto", description="Engine name, or auto: vllm if engine_url is set, else transformers."
    )
    engine_url: str | None = Field(None, description="URL of an already running server for this model.")
    engines: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Engine settings, as rollout.engines (e.g. {openai: {base_url: ...}}).",
    )
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 is greedy.")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    max_tokens: int = Field(4096, ge=1, description="Most tokens one call generates.")
    max_model_len: int = Field(18000, ge=1, description="Most tokens in one context: prompt plus generation.")
    tool_parser: str = Field("hermes", description="How tool calls are read from generated text.")
    tool_format: Literal["auto", "template", "hermes"] = Field(
        "auto", description="How tools reach this model; as model.tool_format."
    )
    tensor_model_parallel_size: int = Field(
        1, ge=1, description="GPUs of a vLLM server astuner starts for it."
    )


AUXILIARY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class HealthConfig(Section):
    """`health`: the run's health checks (`astuner.core.health`), as this config means them."""

    acknowledged: list[str] = Field(
        default_factory=list,
        description="Health checks this config crosses on purpose (e.g. [truncation] for a reply budget "
        "kept short by choice): each still counts and is shown, marked acknowledged, with one info "
        "line instead of a warning. Built-in: no_tool_calls, tool_parse_failures, tool_parse_failure_rate, "
        "zero_advantage_groups, truncation, prefix_breaks, logprob_gap, rollout_logprob_gap.",
    )


class DebugConfig(Section):
    debug_max_parallel: int = Field(4, ge=1, description="Rollouts at once; 1 = all in the main thread.")
    debug_first_n_tasks: int = Field(2, ge=1)
    split: Literal["train", "validation"] = Field("validation", description="Which split to run.")
    num_repeat: int = Field(1, ge=1, description="Runs per task in a debug run.")
