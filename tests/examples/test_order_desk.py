"""The order-desk example: its config, orders, per-role judge, and three roles through a real rollout.

The rollouts run the example's own config (reader, judge, SmolLM2's tokenizer
and tool format) through `rollout_stack` with a scripted engine in place of
the model: each role answers as a perfect player, or as one that hands on no
number, so the hand-off, the per-agent tags and the per-role rewards are
checked without weights.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from astuner import Task, WorkflowOutput
from astuner.components import build_reader
from astuner.config import AstunerConfig, load_config
from astuner.core.metrics import rollout_metrics
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.plugins import Plugins
from astuner.rollout.agents import agent_plan
from astuner.rollout.stack import rollout_stack, sampling_from_config
from astuner.testing.engines import ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "order_desk"
_PRICE = re.compile(r"Price (\d+) boxes at (\d+) cents each\.")
_TOTAL = re.compile(r"The boxes cost (\d+) cents and shipping costs (\d+) cents\.")
_RECEIPT = re.compile(r"The total is (\d+) cents\. Write the receipt line\.")
_RESULT = re.compile(r"Result of (?:multiply|add):\n(.*?)<\|im_end\|>", re.DOTALL)


@pytest.fixture(scope="module")
def example() -> Iterator[dict[str, ModuleType]]:
    """desk.py, judge.py and workflow.py, imported as the kernel does: from the example's folder."""
    names = ("desk", "judge", "workflow")
    for name in names:  # another example's `workflow` or `judge`, imported earlier in this process
        sys.modules.pop(name, None)
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in names:
            sys.modules.pop(name, None)


@pytest.fixture
def config(workdir: Path) -> AstunerConfig:
    return load_config(EXAMPLE / "order_desk.yaml", backbone="debug")


def test_the_config_trains_pricer_and_cashier_each_on_an_adapter(config: AstunerConfig) -> None:
    assert config.task_reader.type == "desk->OrderReader"
    assert config.task_judge.judge_protocol == "judge->OrderDeskJudge"
    plan = agent_plan(
        config.agents,
        trainable_targets=config.rollout.trainable_targets,
        shared_lora_rank=config.model.lora.rank,
    )
    assert plan.trainable == ("pricer", "cashier")
    assert {name: lora.rank for name, lora in plan.trained_adapters.items()} == {"pricer": 8, "cashier": 8}
    assert "clerk" not in plan.adapters  # the control: it plays on the base model


def test_orders_are_seeded_and_the_splits_differ(example: dict[str, ModuleType]) -> None:
    reader = example["desk"].OrderReader(train_size=50, validation_size=8)
    first = [task.metadata for task in reader.read("validation")]
    assert first == [task.metadata for task in reader.read("validation")]
    train = [task.metadata for task in reader.read("train")]
    assert len(first) == 8 and not [m for m in first if m in train]
    for items in first + train:
        assert 11 <= items["boxes"] <= 99 and 101 <= items["price"] <= 999 and 101 <= items["shipping"] <= 999


def test_tools_numbers_and_dollars(example: dict[str, ModuleType]) -> None:
    desk = example["desk"]
    assert (desk.multiply(37, 412), desk.add(15244, 658)) == (15244, 15902)
    with pytest.raises(TypeError, match="b must be an integer"):
        desk.add(1, "2")
    assert desk.last_integer("It costs 15,244 cents.") == 15244 and desk.last_integer("no idea") is None
    assert (desk.dollars(15902), desk.dollars(7), desk.dollars(100)) == ("$159.02", "$0.07", "$1.00")
    pricer, clerk = desk.ROLES["pricer"], desk.ROLES["clerk"]
    assert [tool["function"]["name"] for tool in pricer.tools] == ["multiply"] and clerk.tools == []
    assert [m["role"] for m in pricer.demonstration()] == ["user", "assistant", "tool", "assistant"]
    assert pricer.demonstration()[2]["content"] == "7320"  # the demonstration's tool result is the tool's
    assert [m["role"] for m in clerk.demonstration()] == ["user", "assistant"]


def judged(example: dict[str, ModuleType], steps: list[dict]) -> object:
    items = {"boxes": 37, "price": 412, "shipping": 658}
    output = WorkflowOutput(
        response="", metadata={**items, "steps": steps, "receipt": steps[-1]["answer"], "expected": "$159.02"}
    )
    task = Task(task_id="t", main_query="", metadata=items)
    return asyncio.run(example["judge"].OrderDeskJudge().judge(task, output))


def step(role: str, given: int | None, answer: str, tool_calls: int = 1) -> dict:
    number = [int(n) for n in re.findall(r"\d+", answer.replace(",", ""))]
    return {
        "role": role,
        "given": given,
        "answer": answer,
        "number": number[-1] if number else None,
        "tool_calls": tool_calls,
    }


def test_each_role_is_credited_for_its_own_part(example: dict[str, ModuleType]) -> None:
    perfect = judged(
        example,
        [
            step("pricer", None, "15244"),
            step("cashier", 15244, "15902"),
            step("clerk", 15902, "Total: $159.02", 0),
        ],
    )
    assert perfect.reward == {"pricer": 1.0, "cashier": 1.0, "clerk": 1.0} and perfect.is_success
    assert perfect.metrics["order_right"] == 1.0 and perfect.metrics["agent/clerk/correct"] == 1.0
    # a wrong price handed on: the cashier that adds it right and the clerk that writes it right keep
    # their reward; the order is wrong
    wrong_price = judged(
        example,
        [
            step("pricer", None, "15000", 0),
            step("cashier", 15000, "15658"),
            step("clerk", 15658, "Total: $156.58", 0),
        ],
    )
    assert wrong_price.reward == {"pricer": 0.0, "cashier": 1.0, "clerk": 1.0}
    assert not wrong_price.is_success and wrong_price.metrics["order_right"] == 0.0
    assert wrong_price.metrics["agent/pricer/tool_call_rate"] == 0.0
    assert wrong_price.metrics["agent/cashier/tool_call_rate"] == 1.0
    assert "agent/clerk/tool_call_rate" not in wrong_price.metrics  # the clerk has no tool
    cents_as_dollars = judged(
        example,
        [
            step("pricer", None, "15244"),
            step("cashier", 15244, "15902"),
            step("clerk", 15902, "Total: $15902", 0),
        ],
    )
    assert cents_as_dollars.reward["clerk"] == 0.0 and not cents_as_dollars.is_success
    stopped = judged(example, [step("pricer", None, "I do not know.", 0)])
    assert stopped.reward == {"pricer": 0.0} and stopped.metrics["roles_reached"] == 1.0


def _answer(prompt: str, pattern: re.Pattern[str], tool: str, work: Callable[[int, int], int]) -> str:
    """A perfect tool role: call the tool on the last question's numbers, then answer its result."""
    *_, question = pattern.finditer(prompt)
    a, b = question.groups()
    results = _RESULT.findall(prompt[question.end() :])
    if not results:
        return f'<tool_call>\n{{"name": "{tool}", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    assert int(results[-1]) == work(int(a), int(b))
    return f"That is {results[-1]} cents."


def perfect_team(prompt: str) -> str:
    if "You price orders." in prompt:
        return _answer(prompt, _PRICE, "multiply", lambda a, b: a * b)
    if "You total bills." in prompt:
        return _answer(prompt, _TOTAL, "add", lambda a, b: a + b)
    total = int(_RECEIPT.findall(prompt)[-1])
    return f"Total: ${total // 100}.{total % 100:02d}"


def speechless_pricer(prompt: str) -> str:
    assert "You price orders." in prompt  # nobody else is asked: the chain stops
    return "Boxes are nice."


def run_order(config: AstunerConfig, tokenizer: ChatTokenizer, respond: Callable[[str], str]) -> Trajectory:
    plugins = Plugins(load_entry_points=False)
    task = next(iter(build_reader(config, plugins).read("validation")))

    async def main() -> list[Trajectory]:
        engine = ScriptedEngine(tokenizer, respond)
        async with rollout_stack(config, plugins, engine=engine, max_parallel=1) as runner:
            return await runner.run([task], sampling_from_config(config.rollout), progress=False)

    (trajectory,) = asyncio.run(main())
    assert trajectory.error is None, trajectory.error
    return trajectory


def test_a_perfect_team_hands_each_number_on_and_every_role_is_rewarded(
    config: AstunerConfig, smollm2: ChatTokenizer
) -> None:
    trajectory = run_order(config, smollm2, perfect_team)
    items = trajectory.metadata["task"]["metadata"]
    cost = items["boxes"] * items["price"]
    assert trajectory.agent_rewards == {"pricer": 1.0, "cashier": 1.0, "clerk": 1.0} and trajectory.is_success
    # each role's calls carry its name: a tool role's two (the call, the answer), the clerk's one
    assert [call.agent_name for call in trajectory.calls] == [
        "pricer",
        "pricer",
        "cashier",
        "cashier",
        "clerk",
    ]
    prompts = [smollm2.decode(call.prompt_ids) for call in trajectory.calls]
    assert '"name": "multiply"' in prompts[0] and '"name": "add"' not in prompts[0]
    assert '"name": "add"' in prompts[2] and '"name": "multiply"' not in prompts[2]
    assert "You can use these tools" not in prompts[4]  # the clerk has none
    assert f"Result of multiply:\n{cost}" in prompts[1]
    # a role hears only what the one before handed on, never the others' chats
    assert f"The boxes cost {cost} cents and shipping costs {items['shipping']} cents." in prompts[2]
    assert "You price orders." not in prompts[2] and "Result of add" not in prompts[4]
    metrics = rollout_metrics([trajectory], "val")
    assert metrics["val/agent/pricer/judge/correct"] == 1.0
    assert metrics["val/agent/cashier/judge/tool_call_rate"] == 1.0
    assert metrics["val/agent/clerk/reward_mean"] == 1.0


def test_a_role_that_hands_on_no_number_ends_the_order(config: AstunerConfig, smollm2: ChatTokenizer) -> None:
    trajectory = run_order(config, smollm2, speechless_pricer)
    assert [call.agent_name for call in trajectory.calls] == ["pricer"]
    assert trajectory.agent_rewards == {"pricer": 0.0} and not trajectory.is_success
    (only,) = trajectory.metadata["workflow_output"]["metadata"]["steps"]
    assert only["number"] is None and only["tool_calls"] == 0
