"""Which agents of a workflow train, and which LoRA adapter each one generates with.

A multi-agent workflow tags its model calls by agent name (`for_agent`, an
AgentScope agent's name). `rollout.trainable_targets` (else the workflow's
`trainable_targets`) picks the agents that train. `agents.<name>.lora`
gives an agent an adapter of its own on one shared base model: a trained
agent's adapter is what its updates change, and an agent that is not
trained but has an adapter `path` generates with that adapter, frozen.
With any adapter configured the base model stays frozen, so only agents
with an adapter can train; the others run on the base model and their
calls are recorded as untrainable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from astuner.errors import ConfigError

if TYPE_CHECKING:
    from astuner.config_sections import AgentConfig, AgentLoraConfig


@dataclass(frozen=True)
class AgentPlan:
    """`trainable`: the agents whose calls train (empty: every agent); `trained_adapters`: by agent,
    the settings of each adapter trained this run; `fixed_adapters`: by agent, the folder of each
    adapter used but not trained; `targets_configured`: whether `trainable` came from
    `rollout.trainable_targets` (else from the workflow), for messages that say where to change them."""

    trainable: tuple[str, ...] = ()
    trained_adapters: dict[str, AgentLoraConfig] = field(default_factory=dict)
    fixed_adapters: dict[str, str] = field(default_factory=dict)
    targets_configured: bool = False

    @property
    def adapters(self) -> frozenset[str]:
        """Every agent that generates with an adapter of its own (the adapter has the agent's name)."""
        return frozenset(self.trained_adapters) | frozenset(self.fixed_adapters)


def agent_plan(
    agents: Mapping[str, AgentConfig],
    workflow_targets: Sequence[str] = (),
    *,
    trainable_targets: Sequence[str],
    shared_lora_rank: int,
) -> AgentPlan:
    """The plan of the `agents` block (`config.agents`) and the trainable targets; a ConfigError naming
    the key when they do not fit together.

    `trainable_targets` is `config.rollout.trainable_targets` (it wins over the workflow's
    `workflow_targets`), and `shared_lora_rank` is `config.model.lora.rank`, the one adapter shared by
    every agent, which per-agent adapters exclude.
    """
    configured = bool(trainable_targets)
    targets = tuple(trainable_targets or workflow_targets)
    loras = {name: agent.lora for name, agent in agents.items() if agent.lora is not None}
    if not loras:
        return AgentPlan(targets, targets_configured=configured)
    if shared_lora_rank > 0:
        raise ConfigError(
            "model.lora.rank and agents.<name>.lora are both set: with per-agent adapters the base "
            "model stays frozen and each agent trains its own adapter. Set model.lora.rank: 0, or "
            "remove the agents' lora blocks to train one shared adapter."
        )
    targets = targets or tuple(sorted(loras))
    missing = [name for name in targets if name not in loras]
    if missing:
        raise ConfigError(
            f"trainable_targets names {', '.join(map(repr, missing))}, which have no agents.<name>.lora: "
            "with per-agent adapters only adapters train (the base model is shared and frozen). Add "
            f"agents.{missing[0]}.lora, or leave the agent out of rollout.trainable_targets."
        )
    fixed: dict[str, str] = {}
    for name, lora in loras.items():
        if name in targets:
            continue
        if lora.path is None:
            raise ConfigError(
                f"agents.{name}.lora has no path, and agent '{name}' does not train (trainable_targets: "
                f"{', '.join(targets)}): an untrained new adapter would change nothing. Set "
                f"agents.{name}.lora.path to a trained adapter's folder, add '{name}' to "
                f"rollout.trainable_targets, or remove agents.{name}.lora to run it on the base model."
            )
        fixed[name] = lora.path
    return AgentPlan(targets, {name: loras[name] for name in targets}, fixed, targets_configured=configured)


def refuse_agent_adapters(
    agents: Mapping[str, AgentConfig], where: str, why: str, need: str, grouping: str = ""
) -> None:
    """A ConfigError naming every `agents.<name>.lora` of the `agents` block (`config.agents`), for a
    backbone (or one of its rollout paths) that runs every agent on one model; nothing when no agent
    has an adapter.

    `where` names it ("backbone verl"), `why` says why it has no per-agent adapters, `need` what
    would serve them ("backbone torch"), and `grouping` how it groups each agent's runs with
    per-agent rewards, when it does ("each agent's experiences form a group of their own")."""
    keys = [f"agents.{name}.lora" for name, agent in agents.items() if agent.lora is not None]
    if not keys:
        return
    grouped = f" With per-agent rewards, {grouping}." if grouping else ""
    raise ConfigError(
        f"{', '.join(keys)}: {where} has no per-agent adapters ({why}); they need {need}, or remove the "
        f"agents' lora blocks to stay on {where}. What does carry over to {where}: per-agent rewards "
        f"(JudgeOutput(reward={{agent: value}})) and trainable targets (rollout.trainable_targets).{grouped}"
    )
