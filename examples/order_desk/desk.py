"""The order desk's parts: the orders (a reader), the roles, their tools and the hand-off.

An order is "37 boxes at 412 cents each, shipping 658 cents". Three roles
work it in turn, each seeing only what the one before handed over:

- the `pricer` prices the boxes with the `multiply` tool: 37 x 412;
- the `cashier` adds the shipping to the pricer's figure with the `add` tool;
- the `clerk` writes the receipt line for the customer, in dollars.

The numbers are ones SmolLM2-135M gets wrong by heart (3-digit by 2-digit
products, 5-digit sums) and right by calling its tool; cents to dollars is a
format, no tool. Each role's conversation opens with one worked exchange of
its own (`Role.demonstration`), so the base model sometimes does its part at
the training temperature: a signal to learn from, without a warm start.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from astuner import Task

_INTEGER = re.compile(r"-?\d+(?:,\d{3})*")


def last_integer(text: str) -> int | None:
    """The last integer written in `text` ("15,244" read as 15244), None when there is none."""
    found = _INTEGER.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def dollars(cents: int) -> str:
    """How the receipt writes `cents`: 15302 -> "$153.02"."""
    return f"${cents // 100}.{cents % 100:02d}"


def _integers(**values: Any) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r}")


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    _integers(a=a, b=b)
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers."""
    _integers(a=a, b=b)
    return a + b


def tool_schema(name: str, description: str) -> dict[str, Any]:
    """The OpenAI function schema of a two-integer tool."""
    numbers = {
        key: {"type": "integer", "description": f"The {nth} number."}
        for key, nth in (("a", "first"), ("b", "second"))
    }
    parameters = {"type": "object", "properties": numbers, "required": ["a", "b"]}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


@dataclass(frozen=True)
class Role:
    """One role of the desk: its instructions, its tool (None: it only writes), and one worked
    exchange (question, the tool's arguments, the answer) shown before its own question."""

    system: str
    tool: Callable[[int, int], int] | None
    demo_question: str
    demo_arguments: tuple[int, int] | None
    demo_answer: str

    @property
    def tools(self) -> list[dict[str, Any]]:
        if self.tool is None:
            return []
        return [tool_schema(self.tool.__name__, (self.tool.__doc__ or "").strip())]

    def demonstration(self) -> list[dict[str, Any]]:
        """The worked exchange as chat messages: question, tool call and result, answer."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.demo_question}]
        if self.tool is not None and self.demo_arguments is not None:
            a, b = self.demo_arguments
            call = {
                "id": "demo_0",
                "type": "function",
                "function": {"name": self.tool.__name__, "arguments": json.dumps({"a": a, "b": b})},
            }
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": "demo_0",
                    "name": self.tool.__name__,
                    "content": str(self.tool(a, b)),
                }
            )
        messages.append({"role": "assistant", "content": self.demo_answer})
        return messages


ROLES: dict[str, Role] = {
    "pricer": Role(
        system="You price orders. Multiply with the multiply tool, "
        "then reply with the price in cents as a number.",
        tool=multiply,
        demo_question="Price 24 boxes at 305 cents each.",
        demo_arguments=(24, 305),
        demo_answer="24 boxes at 305 cents cost 7320 cents.",
    ),
    "cashier": Role(
        system="You total bills. Add with the add tool, then reply with the total in cents as a number.",
        tool=add,
        demo_question="The boxes cost 7320 cents and shipping costs 415 cents. What is the total?",
        demo_arguments=(7320, 415),
        demo_answer="The total is 7735 cents.",
    ),
    "clerk": Role(
        system="You write receipts. Reply with one line: Total: $<dollars>.<cents>",
        tool=None,
        demo_question="The total is 7735 cents. Write the receipt line.",
        demo_arguments=None,
        demo_answer="Total: $77.35",
    ),
}
"""The roles in the order they work an order."""


def order(seed: str) -> dict[str, int]:
    """The order of `seed`: boxes (11-99), price per box in cents (101-999), shipping in cents (101-999)."""
    draw = random.Random(f"order-desk:{seed}")
    return {
        "boxes": draw.randint(11, 99),
        "price": draw.randint(101, 999),
        "shipping": draw.randint(101, 999),
    }


class OrderReader:
    """Tasks of one order each (`metadata`: boxes, price, shipping). Named by import string in
    order_desk.yaml (`desk->OrderReader`); no download. Train and validation orders come from
    different seeds."""

    def __init__(self, train_size: int = 2000, validation_size: int = 32) -> None:
        self.sizes = {"train": train_size, "validation": validation_size}

    def read(self, split: str) -> Iterator[Task]:
        for index in range(self.sizes[split]):
            seed = f"{split}-{index}"
            items = order(seed)
            yield Task(
                task_id=f"order-{seed}",
                main_query=f"{items['boxes']} boxes at {items['price']} cents each, "
                f"shipping {items['shipping']} cents.",
                metadata=items,
            )
