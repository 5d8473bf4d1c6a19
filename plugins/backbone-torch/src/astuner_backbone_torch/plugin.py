"""Entry point of `astuner-backbone-torch`: engine `transformers`, backbone `torch`, command `astuner sft`.

Importing this module is cheap: torch and transformers load only when a
factory runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from astuner.api import Register, hookimpl
from astuner_backbone_torch.settings import TorchSettings, TransformersEngineSettings

if TYPE_CHECKING:
    from astuner.api import EngineModel, Runs
    from astuner_backbone_torch.backbone import TorchBackbone
    from astuner_backbone_torch.engine import TransformersEngine


def _transformers_engine(settings: TransformersEngineSettings, model: EngineModel) -> TransformersEngine:
    from astuner_backbone_torch.engine import TransformersEngine

    return TransformersEngine.serving(settings, model)


def _torch_backbone(settings: TorchSettings) -> TorchBackbone:
    from astuner_backbone_torch.backbone import TorchBackbone

    return TorchBackbone(settings)


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "transformers",
        _transformers_engine,
        settings=TransformersEngineSettings,
        summary="In-process HuggingFace model (CPU or GPU), batching concurrent rollouts.",
    )


@hookimpl
def register_backbones(register: Register) -> None:
    register(
        "torch",
        _torch_backbone,
        settings=TorchSettings,
        summary="GRPO on one machine (CPU or one GPU): PPO-clip, KL, LoRA, checkpoints, exact resume.",
        reads=(
            "data.train_batch_size",
            "trainer_common",
            "trainer_common.keep_last_checkpoints",
            "trainer_common.max_staleness",
            "trainer_common.algorithm.rollout_correction",
        ),
    )


@hookimpl
def register_commands(cli: typer.Typer, runs: Runs) -> None:
    from astuner_backbone_torch.sft_command import sft_command

    cli.command("sft")(sft_command(runs))
