"""Entry point of `astuner-backbone-torch`: registers its engine (and backbone).

Importing this module is cheap: torch and transformers load only when a
factory runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from astuner.hookspecs import Register, hookimpl
from astuner_backbone_torch.engine import TransformersEngineSettings

if TYPE_CHECKING:
    from astuner.config import AstunerConfig
    from astuner_backbone_torch.engine import TransformersEngine


def _transformers_engine(settings: TransformersEngineSettings, config: AstunerConfig) -> TransformersEngine:
    from astuner_backbone_torch.engine import TransformersEngine

    return TransformersEngine.from_config(settings, config)


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "transformers",
        _transformers_engine,
        settings=TransformersEngineSettings,
        summary="In-process HuggingFace model (CPU or GPU), batching concurrent rollouts.",
    )
