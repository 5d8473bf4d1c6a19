"""Entry point of `astuner-backbone-verl`: registers backbone `verl`.

Importing this module never imports verl, so `astuner plugins list` and
`astuner config show --backbone verl` work where verl is not installed;
`astuner_readiness()` then reports the missing engine with its install line.
"""

from __future__ import annotations

import importlib.util

from astuner.api import NotReady, Register, hookimpl

INSTALL_HINT = "pip install 'astuner-backbone-verl[engine]' (verl 0.9.1; on GPU machines add verl[vllm])"


def astuner_readiness() -> NotReady | None:
    """Ready when verl is importable (looked up, not imported: importing verl takes seconds)."""
    if importlib.util.find_spec("verl") is None:
        return NotReady("engine not installed", INSTALL_HINT)
    return None


def _verl_backbone() -> object:
    from astuner_backbone_verl.backbone import VerlBackbone

    return VerlBackbone()


@hookimpl
def register_backbones(register: Register) -> None:
    register(
        "verl",
        _verl_backbone,
        summary="verl's PPO/GRPO trainer on a Ray cluster, the workflow run as a verl agent loop.",
        reads=(
            "verl",
            "data.train_batch_size",
            "data.max_prompt_length",
            "data.max_response_length",
            "trainer_common",
            "trainer_common.nnodes",
            "trainer_common.n_gpus_per_node",
            "trainer_common.ulysses_sequence_parallel_size",
            "rollout.tensor_model_parallel_size",
        ),
    )
