"""The order-desk example: its config, orders, per-role judge, and three roles through a real rollout.

The rollouts run the example's own config (reader, judge, SmolLM2's tokenizer
and tool format) through `rollout_stack` with a scripted engine in place of
the model: each role answers as a perfect player, or the clerk hands on too
few numbers, so the hand-off, the per-agent tags and the per-role rewards
are checked without weights.
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
from astuner.config import AstunerConfig, load_config
from astuner.core.metrics import rollout_metrics
from astuner.core.tokenizer import ChatTokenizer
from astuner.rollout.agents import agent_plan
from astuner.testing.engines import scripted_rollout

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "order_desk"
_PRICE = re.compile(r"Price (\d+) boxes at (\d+) cents each\.")
_TOTAL = re.compile(r"The boxes cost (\d+) cents and shipping costs (\d+) cents\.")
_ORDER = re.compile(r"Please send ([a-z-]+) boxes at (\d+) cents each\.")
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
    desk = example["desk"]
    reader = desk.OrderReader(train_size=50, validation_size=8)
    first = list(reader.read("validation"))
    assert [t.metadata for t in first] == [t.metadata for t in reader.read("validation")]
    train = [task.metadata for task in reader.read("train")]
    assert len(first) == 8 and not [t for t in first if t.metadata in train]
    for task in first:
        items = task.metadata
        assert 11 <= items["boxes"] <= 99 and 101 <= items["price"] <= 999 and 101 <= items["shipping"] <= 999
        # the customer writes the count in words: the clerk's job is to read it
        assert task.main_query == (
            f"Hello! Please send {desk.in_words(items['boxes'])} boxes at {items['price']} cents each. "
            f"Shipping is {items['shipping']} cents."
        )


def test_tools_numbers_and_words(example: dict[str, ModuleType]) -> None:
    desk = example["desk"]
    assert (desk.multiply(37, 412), desk.add(15244, 658)) == (15244, 15902)
    with pytest.raises(TypeError, match="b must be an integer"):
        desk.add(1, "2")
    assert desk.integers("Ticket: 37 boxes x 15,244 cents") == [37, 15244] and desk.integers("none") == []
    words = [desk.in_words(n) for n in (1, 9, 10, 13, 20, 37, 90, 99)]
    assert words == ["one", "nine", "ten", "thirteen", "twenty", "thirty-seven", "ninety", "ninety-nine"]
    with pytest.raises(ValueError, match="not between 1 and 99"):
        desk.in_words(100)
    pricer, clerk = desk.ROLES["pricer"], desk.ROLES["clerk"]
    assert list(desk.ROLES) == ["clerk", "pricer", "cashier"]  # the order they work in
    assert [tool["function"]["name"] for tool in pricer.tools] == ["multiply"] and clerk.tools == []
    assert [m["role"] for m in pricer.demonstration()] == ["user", "assistant", "tool", "assistant"]
    assert pricer.demonstration()[2]["content"] == "7320"  # the demonstration's tool result is the tool's
    assert [m["role"] for m in clerk.demonstration()] == ["user", "assistant"]


def judged(example: dict[str, ModuleType], steps: list[dict]) -> object:
    items = {"boxes": 37, "price": 412, "shipping": 658}
    total = steps[-1]["handed"] if steps[-1]["role"] == "cashier" else None
    output = WorkflowOutput(response="", metadata={**items, "steps": steps, "total": total})
    task = Task(task_id="t", main_query="", metadata=items)
    return asyncio.run(example["judge"].OrderDeskJudge().judge(task, output))


def step(role: str, given: object, handed: object, tool_calls: int = 1) -> dict:
    return {"role": role, "given": given, "handed": handed, "answer": "", "tool_calls": tool_calls}


def test_each_role_is_credited_for_its_own_part(example: dict[str, ModuleType]) -> None:
    perfect = judged(
        example,
        [step("clerk", None, [37, 412], 0), step("pricer", [37, 412], 15244), step("cashier", 15244, 15902)],
    )
    assert perfect.reward == {"clerk": 1.0, "pricer": 1.0, "cashier": 1.0} and perfect.is_success
    assert perfect.metrics["order_right"] == 1.0 and perfect.metrics["agent/clerk/correct"] == 1.0
    # a misread count handed on: the pricer and the cashier that work it right keep their reward; the
    # order is wrong
    misread = judged(
        example,
        [
            step("clerk", None, [73, 412], 0),
            step("pricer", [73, 412], 30076, 0),
            step("cashier", 30076, 30734),
        ],
    )
    assert misread.reward == {"clerk": 0.0, "pricer": 1.0, "cashier": 1.0}
    assert not misread.is_success and misread.metrics["order_right"] == 0.0
    assert misread.metrics["agent/pricer/tool_call_rate"] == 0.0
    assert misread.metrics["agent/cashier/tool_call_rate"] == 1.0
    assert "agent/clerk/tool_call_rate" not in misread.metrics  # the clerk has no tool
    wrong_sum = judged(
        example,
        [step("clerk", None, [37, 412], 0), step("pricer", [37, 412], 15244), step("cashier", 15244, 15244)],
    )
    assert wrong_sum.reward == {"clerk": 1.0, "pricer": 1.0, "cashier": 0.0} and not wrong_sum.is_success
    stopped = judged(example, [step("clerk", None, None, 0)])
    assert stopped.reward == {"clerk": 0.0} and stopped.metrics["roles_reached"] == 1.0


def _answer(prompt: str, pattern: re.Pattern[str], tool: str, work: Callable[[int, int], int]) -> str:
    """A perfect tool role: call the tool on the last question's numbers, then answer its result."""
    *_, question = pattern.finditer(prompt)
    a, b = question.groups()
    results = _RESULT.findall(prompt[question.end() :])
    if not results:
        return f'<tool_call>\n{{"name": "{tool}", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    assert int(results[-1]) == work(int(a), int(b))
    return f"That is {results[-1]} cents."


def perfect_team(desk: ModuleType) -> Callable[[str], str]:
    counts = {desk.in_words(n): n for n in range(1, 100)}

    def respond(prompt: str) -> str:
        if "You price orders." in prompt:
            return _answer(prompt, _PRICE, "multiply", lambda a, b: a * b)
        if "You total bills." in prompt:
            return _answer(prompt, _TOTAL, "add", lambda a, b: a + b)
        *_, (count, price) = _ORDER.findall(prompt)
        return f"Ticket: {counts[count]} boxes x {price} cents"

    return respond


def clerk_without_numbers(prompt: str) -> str:
    assert "You take orders." in prompt  # nobody else is asked: the chain stops
    return "Ticket: many boxes x 305 cents"


def test_a_perfect_team_hands_each_number_on_and_every_role_is_rewarded(
    example: dict[str, ModuleType], config: AstunerConfig, smollm2: ChatTokenizer
) -> None:
    trajectory = scripted_rollout(config, smollm2, perfect_team(example["desk"]))
    items = trajectory.metadata["task"]["metadata"]
    cost = items["boxes"] * items["price"]
    assert trajectory.agent_rewards == {"clerk": 1.0, "pricer": 1.0, "cashier": 1.0} and trajectory.is_success
    # each role's calls carry its name: the clerk's one, a tool role's two (the call, the answer)
    assert [call.agent_name for call in trajectory.calls] == [
        "clerk",
        "pricer",
        "pricer",
        "cashier",
        "cashier",
    ]
    prompts = [smollm2.decode(call.prompt_ids) for call in trajectory.calls]
    assert "You can use these tools" not in prompts[0]  # the clerk has none
    assert '"name": "multiply"' in prompts[1] and '"name": "add"' not in prompts[1]
    assert '"name": "add"' in prompts[3] and '"name": "multiply"' not in prompts[3]
    assert f"Price {items['boxes']} boxes at {items['price']} cents each." in prompts[1]
    assert f"Result of multiply:\n{cost}" in prompts[2]
    # a role hears only what the one before handed on, never the others' chats
    assert f"The boxes cost {cost} cents and shipping costs {items['shipping']} cents." in prompts[3]
    assert "Please send" not in prompts[1].split("<|im_start|>user")[-1]
    assert "You take orders." not in prompts[3] and "Result of multiply" not in prompts[3]
    metrics = rollout_metrics([trajectory], "val")
    assert metrics["val/agent/pricer/judge/correct"] == 1.0
    assert metrics["val/agent/cashier/judge/tool_call_rate"] == 1.0
    assert metrics["val/agent/clerk/reward_mean"] == 1.0 and metrics["val/judge/order_right"] == 1.0


def test_a_ticket_without_two_numbers_ends_the_order(config: AstunerConfig, smollm2: ChatTokenizer) -> None:
    trajectory = scripted_rollout(config, smollm2, clerk_without_numbers)
    assert [call.agent_name for call in trajectory.calls] == ["clerk"]
    assert trajectory.agent_rewards == {"clerk": 0.0} and not trajectory.is_success
    (only,) = trajectory.metadata["workflow_output"]["metadata"]["steps"]
    assert only["handed"] is None and only["tool_calls"] == 0
