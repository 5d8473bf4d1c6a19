"""Entry point of `astuner-backbone-trinity`: registers backbone `trinity`.

Importing this module never imports Trinity, so `astuner plugins list` and
`astuner config show --backbone trinity` work where it is not installed;
`astuner_readiness()` then reports the missing engine with its install line.
"""

from __future__ import annotations

import importlib.util

from astuner.api import NotReady, Register, hookimpl

INSTALL_HINT = (
    "pip install 'astuner-backbone-trinity[engine]' (trinity-rft 0.6.0, in an environment without verl 0.9)"
)


def astuner_readiness() -> NotReady | None:
    """Ready when Trinity is importable (looked up, not imported)."""
    if importlib.util.find_spec("trinity") is None:
        return NotReady("engine not installed", INSTALL_HINT)
    return None


def _trinity_backbone() -> object:
    from astuner_backbone_trinity.backbone import TrinityBackbone

    return TrinityBackbone()


@hookimpl
def register_backbones(register: Register) -> None:
    register(
        "trinity",
        _trinity_backbone,
        summary="Trinity-RFT explorer/trainer on a Ray cluster, the workflow run as a Trinity workflow.",
        reads=(
            "trinity",
            "data.train_batch_size",
            "data.max_prompt_length",
            "data.max_response_length",
            "trainer_common",
            "trainer_common.nnodes",
            "trainer_common.n_gpus_per_node",
            "trainer_common.ulysses_sequence_parallel_size",
            "rollout.tensor_model_parallel_size",
            "rollout.multi_turn.expected_steps",
        ),
        # the seeds' `trainer_common.trinity_only__n_vllm_engine`: the explorer's engine count
        key_homes={"n_vllm_engine": "trinity.explorer.rollout_model.engine_num"},
    )
