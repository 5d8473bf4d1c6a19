"""verl's workers load the model and serve it: the head checks neither `model.path` nor `rollout.engine`."""

from astuner_backbone_verl.backbone import VerlBackbone

from astuner.components import preflight
from astuner.config import load_config


def test_a_model_path_on_the_gpu_nodes_is_not_looked_for_on_the_head(write_config, plugins) -> None:
    overrides = ["model.path=/gpu-node/models/qwen", "rollout.engine=vllm"]
    config = load_config(write_config({}), overrides, environ={})
    uses = VerlBackbone().run_uses(config)
    assert uses.splits == {"train", "validation"} and uses.model == "elsewhere" and not uses.engine
    preflight(config, plugins, uses)  # neither the folder nor engine vllm is on this machine
