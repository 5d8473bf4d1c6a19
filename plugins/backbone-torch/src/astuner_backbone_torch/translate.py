"""The torch backbone's reading of the whole config: each of its parts gets the values it uses.

Only the entries hold the run's `AstunerConfig`: `TorchBackbone.train` and
the `astuner sft` command. They pick out here what the trainer
(`UpdateSettings`), validation (`ValidationSettings`), the resumed
checkpoint (where `trainer_common.resume: auto` looks) and fine-tuning
(`SftRun`) read, and hand each part only that; the parts' signatures say
what they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from astuner.training import (
    AgentPlan,
    AstunerConfig,
    ChosenLoss,
    agent_plan,
    runner_settings_from_config,
    sampling_from_config,
)
from astuner_backbone_torch.policy import ModelSettings
from astuner_backbone_torch.settings import TorchSettings
from astuner_backbone_torch.trainer import UpdateSettings
from astuner_backbone_torch.validation import ValidationSettings


@dataclass(frozen=True)
class SftRun:
    """What fine-tuning (`sft.run_sft`) reads of the run's config (`sft_run` picks it out).

    `model`: `model.path` and `model.lora`; `plan`: the agents and their
    adapters; `tracker`: the context tracker's settings, which render a
    demonstration as the config's rollouts are rendered; `update`: the
    trainer's; `seed`, `resume`, `keep_last_checkpoints` and `tensorboard`
    (a `tensorboard` logger): of `trainer_common`; `experiment_root`: where
    `resume: auto` looks; `experiment_name`: recorded with each checkpoint.
    """

    model: ModelSettings
    plan: AgentPlan
    tracker: Any
    update: UpdateSettings
    seed: int
    resume: str
    experiment_root: Path
    experiment_name: str
    tensorboard: bool
    keep_last_checkpoints: int | None


def update_settings(config: AstunerConfig, settings: TorchSettings, loss: ChosenLoss) -> UpdateSettings:
    """An RL update's settings: `trainer_common` (optimizer, the policy loss, KL, batching, rollout
    correction), the sampling temperature of `rollout`, and this backbone's `torch:` knobs.

    `loss` is the policy loss `trainer_common.algorithm.policy_loss` chose
    (`astuner.training.policy_loss`), with its clip range and aggregation.
    """
    t = config.trainer_common
    correction = t.algorithm.rollout_correction
    return UpdateSettings(
        lr=t.optim.lr,
        weight_decay=t.optim.weight_decay,
        lr_warmup_steps=t.optim.lr_warmup_steps,
        # Log-probs are of the distribution that was sampled from: logits / T, T each call's
        # recorded one (`batching.token_temperatures`); this one for calls recorded without it.
        temperature=config.rollout.temperature or 1.0,
        policy_loss=loss,
        use_kl_loss=t.use_kl_loss and t.kl_loss_coef > 0,
        kl_loss_coef=t.kl_loss_coef,
        kl_loss_type=t.kl_loss_type,
        grad_clip=t.grad_clip,
        max_tokens=t.max_token_len_per_gpu,
        mini_batch_num=t.mini_batch_num,
        logprob_chunk=settings.logprob_chunk,
        skip_zero_advantage=settings.skip_zero_advantage,
        max_nonfinite_updates=settings.max_nonfinite_updates,
        share_prompt_prefix=settings.share_prompt_prefix,
        rollout_is=correction.rollout_is,
        rollout_is_threshold=correction.rollout_is_threshold,
    )


def sft_update_settings(config: AstunerConfig, settings: TorchSettings) -> UpdateSettings:
    """The trainer's settings for SFT: `torch.sft.lr`, NLL (token-mean: `trainer.LIKELIHOOD_AGG_MODE`) at
    temperature 1, one step per batch, no policy loss."""
    t = config.trainer_common
    return UpdateSettings(
        lr=settings.sft.lr,
        weight_decay=t.optim.weight_decay,
        lr_warmup_steps=t.optim.lr_warmup_steps,
        temperature=1.0,
        grad_clip=t.grad_clip,
        max_tokens=t.max_token_len_per_gpu,
        logprob_chunk=settings.logprob_chunk,
        max_nonfinite_updates=settings.max_nonfinite_updates,
        share_prompt_prefix=settings.share_prompt_prefix,
    )


def validation_settings(config: AstunerConfig) -> ValidationSettings:
    """Validation's sampling (`rollout.val_kwargs`), runs per task and pass@k."""
    return ValidationSettings(
        sampling=sampling_from_config(config.rollout, validation=True),
        repeats=config.rollout.val_kwargs.num_repeat,
        pass_n=config.trainer_common.val_pass_n,
    )


def experiment_root(config: AstunerConfig) -> Path:
    """`<experiment_dir>/<experiment_name>`: the experiment's runs, where `resume: auto` looks."""
    return Path(config.experiment_dir) / config.experiment_name


def sft_run(config: AstunerConfig, settings: TorchSettings) -> SftRun:
    """What `astuner sft` reads of `config`; `settings` is the `torch:` block with the command's
    options applied."""
    t = config.trainer_common
    return SftRun(
        model=config.model,
        plan=agent_plan(
            config.agents,
            trainable_targets=config.rollout.trainable_targets,
            shared_lora_rank=config.model.lora.rank,
        ),
        tracker=runner_settings_from_config(config).tracker,
        update=sft_update_settings(config, settings),
        seed=t.seed,
        resume=t.resume,
        experiment_root=experiment_root(config),
        experiment_name=config.experiment_name,
        tensorboard="tensorboard" in t.logger,
        keep_last_checkpoints=t.keep_last_checkpoints,
    )
