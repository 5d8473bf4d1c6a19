"""Seed 001 (the AppWorld AgentScope agent): its config and workflow fragment, on the reference env server.

AppWorld itself is not installable here; the reference environment service
(`astuner envservice serve`, game `guess_number`) speaks the same EnvService
protocol and is started by `--with-env`. The tutorial's config has no
`task_reader` block (its system defaulted to the env service): the test adds
one, as a user pointing it at their service does. The fragment runs inside
`tutorial/example_appworld/appworld.py`'s `ExampleAgentScopeLearnProtocol`,
whose opening lines (first message, interaction message) are this test's.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from seedtext import code_blocks, indent, needs_seeds, run_seed

from astuner.testing.records import rollout_rows

pytestmark = [needs_seeds, pytest.mark.slow, pytest.mark.timeout(900)]

WORKFLOW = """\
from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg

from astuner import Workflow


class ExampleAgentScopeLearnProtocol(Workflow):
    async def agentscope_execute(self, init_messages, astune_proxy, config):
        first_msg = init_messages[0]
        interaction_message = Msg(name="env", content=init_messages[1]["content"], role="user")
{fragment}
        return astune_proxy
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lay_out(root: Path, port: int) -> Path:
    (fragment,) = code_blocks(1, "python")
    module = root / "tutorial" / "example_appworld" / "appworld.py"
    module.parent.mkdir(parents=True)
    module.write_text(WORKFLOW.format(fragment=indent(fragment, 8)), encoding="utf-8")
    (config,) = code_blocks(1, "yaml")
    data = yaml.safe_load(config)
    data["astune"]["model"]["path"] = "builtin:smollm2-135m-instruct"
    data["astune"]["task_reader"] = {
        "type": "env_service",
        "env_service": {"env_url": f"http://127.0.0.1:{port}", "env_type": "guess_number"},
    }
    path = module.parent / "appworld.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def test_the_seed_001_agent_plays_the_reference_environment(tmp_path: Path) -> None:
    lay_out(tmp_path, free_port())
    err = run_seed(
        "--conf", "tutorial/example_appworld/appworld.yaml", "--backbone=debug", "--with-env", "guess_number",
        # Bounds the tutorial leaves at their defaults (30 turns of up to 4096 tokens), for CI.
        "-o", "rollout.multi_turn.max_steps=3", "-o", "rollout.max_response_length_in_one_turn=24",
        cwd=tmp_path,
    )  # fmt: skip
    assert err.count("is the built-in 'env_service' today") == 1
    assert err.count("'rollout.agentscope_disable_toolcalls' is now 'rollout.disable_toolcalls'") == 1
    (records,) = (tmp_path / "launcher_record" / "appworld").glob("*/rollouts/debug.jsonl")
    (trajectory,) = rollout_rows(records)  # debug_first_n_tasks: 1
    assert trajectory["error"] is None
    turns = trajectory["metadata"]["env_steps"]
    assert 1 <= len(turns) <= 3 and len(trajectory["calls"]) == len(turns)
    seen = trajectory["calls"][0]["messages"]  # the environment's first messages: system prompt, then task
    assert seen[0]["role"] == "system" and "number" in seen[0]["content"].lower()
    assert trajectory["calls"][0]["tools"] is None  # toolkit=None, and tool calls disabled by the config
    assert isinstance(trajectory["reward"], float)  # the environment's /evaluate, through EnvServiceJudge
