"""The order desk's parts: the orders (a reader), the roles, their tools and the hand-off.

A customer writes "Hello! Please send thirty-seven boxes at 412 cents each.
Shipping is 658 cents." Three roles work the order in turn, each seeing only
what the one before handed over:

- the `clerk` takes the order down as a ticket, in digits: "Ticket: 37 boxes x 412 cents";
- the `pricer` prices the ticket's boxes with the `multiply` tool: 37 x 412;
- the `cashier` adds the shipping to the pricer's figure with the `add` tool.

The numbers are ones SmolLM2-135M gets wrong by heart (3-digit by 2-digit
products, 5-digit sums) and right by calling its tool; the ticket is
reading and a format, no tool. Each role's conversation opens with one worked exchange of
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


_ONES = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = [
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def in_words(n: int) -> str:
    """`n` (1-99) as the customer writes it: 37 -> "thirty-seven"."""
    if not 1 <= n <= 99:
        raise ValueError(f"{n} is not between 1 and 99")
    if n < 10:
        return _ONES[n - 1]
    if n < 20:
        return _TEENS[n - 10]
    tens, ones = divmod(n, 10)
    return _TENS[tens - 2] + (f"-{_ONES[ones - 1]}" if ones else "")


def integers(text: str) -> list[int]:
    """The integers written in `text`, in order ("15,244" read as 15244)."""
    return [int(found.replace(",", "")) for found in _INTEGER.findall(text)]


def _require_ints(**values: Any) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r}")


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    _require_ints(a=a, b=b)
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers."""
    _require_ints(a=a, b=b)
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
        """The role's tool as the OpenAI tools list (empty for a role without one)."""
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
    "clerk": Role(
        system="You take orders. Reply with one line: Ticket: <boxes> boxes x <price> cents",
        tool=None,
        demo_question="Hello! Please send twenty-four boxes at 305 cents each. Shipping is 415 cents.",
        demo_arguments=None,
        demo_answer="Ticket: 24 boxes x 305 cents",
    ),
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
        """The orders of `split` ('train' or 'validation'), the same every time."""
        for index in range(self.sizes[split]):
            seed = f"{split}-{index}"
            items = order(seed)
            yield Task(
                task_id=f"order-{seed}",
                main_query=f"Hello! Please send {in_words(items['boxes'])} boxes at {items['price']} "
                f"cents each. Shipping is {items['shipping']} cents.",
                metadata=items,
            )
