"""The `torch:` block of the astuner config: knobs of this backbone that the seeds do not have.

Everything the seeds (and verl) name lives in the shared config
(`trainer_common.*`, `model.lora.*`); this block holds only how this
trainer uses the hardware.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DType = Literal["auto", "float32", "bfloat16"]


class SftSettings(BaseModel):
    """`torch.sft`: supervised fine-tuning with `astuner sft` (a warm start before RL)."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(3, ge=1, description="Passes over the fine-tuning samples.")
    lr: float = Field(
        2e-5, gt=0, description="Learning rate (constant after trainer_common.optim.lr_warmup_steps)."
    )
    batch_size: int = Field(8, ge=1, description="Samples per optimizer step.")
    min_reward: float | None = Field(
        None,
        description="From run records, keep trajectories whose reward is at least this; default: those the "
        "judge counted as a success.",
    )
    save_freq: int | None = Field(
        None, ge=1, description="Checkpoint every N optimizer steps; default: at the end of every epoch."
    )


class TorchSettings(BaseModel):
    """`torch:` (top level of the astuner block)."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("auto", description="auto: cuda if available, else cpu.")
    train_dtype: DType = Field(
        "auto",
        description="Autocast dtype of forward/backward (master weights stay float32). "
        "auto: bfloat16 on a GPU that has it; on a CPU whichever runs this model's forward and backward "
        "faster, measured once per machine and cached.",
    )
    gen_dtype: DType = Field(
        "auto",
        description="dtype of the rollout copy of the policy, synced after every update. "
        "float32 with train_dtype float32 shares the training weights (no copy). auto: bfloat16 on a "
        "GPU; on a CPU whichever decodes this model faster, measured once per machine and cached.",
    )
    num_threads: int | None = Field(
        None,
        ge=1,
        description="torch CPU threads. Default: OMP_NUM_THREADS where set, else the cores other "
        "processes leave free, measured once at start, at most torch's own count (one per physical "
        "core).",
    )
    logprob_chunk: int = Field(1024, ge=1, description="Positions per chunk of the log-prob computation.")
    skip_zero_advantage: bool = Field(
        True,
        description="Skip forward/backward for samples with advantage 0 on every trained token "
        "(their loss and gradient are 0; ignored when a KL loss is on).",
    )
    max_nonfinite_updates: int = Field(
        3,
        ge=1,
        description="Optimizer steps in a row whose loss or gradient is NaN/inf (each skipped) before the "
        "run stops with an error.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward (less memory)."
    )
    share_prompt_prefix: bool = Field(
        True,
        description="Compute each group's common prompt once in the update (samples that start with the same "
        "tokens share one forward/backward of them; off with gradient_checkpointing).",
    )
    sft: SftSettings = Field(
        default_factory=SftSettings, description="`astuner sft` (supervised warm start)."
    )
    val_max_tasks: int | None = Field(
        None, ge=1, description="Validate on the first N validation tasks only (default: all)."
    )


class TransformersEngineSettings(BaseModel):
    """`rollout.engines.transformers`."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 on GPU, float32 on CPU."
    )
    device: str = Field("auto", description="auto: cuda if available, else cpu.")
    max_batch_size: int = Field(64, ge=1, description="Most requests in one generate call.")
    batch_wait_ms: float = Field(
        5.0, ge=0, description="How long to wait for more requests before starting a batch."
    )
    num_threads: int | None = Field(
        None,
        ge=1,
        description="torch CPU threads. Default: OMP_NUM_THREADS where set, else the cores other "
        "processes leave free, measured once at start, at most torch's own count (one per physical "
        "core).",
    )
    continuous_batching: bool = Field(
        True,
        description="Let requests join a batch that is decoding (answered as each finishes). Off: a batch "
        "runs to its end before the next starts, so batches, and so samples, do not depend on timing "
        "(bit-for-bit repeatable runs).",
    )
    packed_decoding: bool = Field(
        True,
        description="On a CPU, run decoding steps of Llama, Mistral and Qwen2 models (no adapters) on fused "
        "copies of the weights packed for oneDNN: faster, at the cost of the weights' memory once more. "
        "Off: every step through transformers' forward.",
    )
    prefix_cache_tokens: int = Field(
        16384,
        ge=0,
        description="Tokens of keys and values kept for prompts that continue earlier calls "
        "(next turns, repeated prompts); 0 turns the reuse off.",
    )
