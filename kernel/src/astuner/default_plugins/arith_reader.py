"""Reader `arith`: a built-in, seeded generator of arithmetic word problems.

The default task set: a fresh install can run and train with no download.
Problems are short stories ("Mia has 7 shells. She finds 5 more. ...") whose
answer is a whole number; difficulty sets how many operations a problem
chains and how large its numbers get. `product` is a tool-use task instead:
"What is 412 times 37?" (3-digit by 2-digit), which a small model gets wrong
by heart and right with a multiply tool (examples/tool_agent). The same seed
gives the same tasks on every machine, and no validation problem appears in
the train split.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from astuner.core.task import Task
from astuner.hookspecs import Register, hookimpl
from astuner.protocols import Split

Difficulty = Literal["easy", "medium", "hard", "product"]

# difficulty -> (min operations, max operations, largest starting/added number, operators)
LEVELS: dict[str, tuple[int, int, int, str]] = {
    "easy": (1, 1, 20, "+-"),
    "medium": (1, 2, 50, "+-*"),
    "hard": (2, 3, 100, "+-*/"),
}
# difficulty `product`: "What is A times B?" with A in 100..999 and B in 10..99
PRODUCT_A, PRODUCT_B = (100, 999), (10, 99)

# The largest sizes a split can have, and why, as the error says it. The validation split
# draws the whole train split first, to avoid every train problem.
MAX_TRAIN_SIZE, MAX_VALIDATION_SIZE = 100_000, 10_000
SIZE_LIMITS = {
    "train_size": (
        MAX_TRAIN_SIZE,
        "easy and product hold about 80,000 different problems, so a larger split only repeats them, "
        "and the validation split reads the whole train split first. For a longer run, raise "
        "trainer_common.total_epochs instead",
    ),
    "validation_size": (
        MAX_VALIDATION_SIZE,
        "validation problems all differ from each other and from every train problem, and easy and "
        "product hold about 80,000 problems in all",
    ),
}

NAMES = ["Mia", "Leo", "Ava", "Sam", "Noah", "Zoe", "Omar", "Lena", "Ivan", "Yuki", "Ana", "Ben"]
ITEMS = ["apples", "marbles", "stickers", "books", "shells", "coins", "pencils", "cards"]


class ArithReaderSettings(BaseModel):
    """`task_reader.arith`: size, difficulty and seed of the generated sets."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="Same seed, same tasks.")
    difficulty: Difficulty = Field(
        "easy",
        description="easy: one + or -; medium: 1-2 of + - *; hard: 2-3 of + - * /; "
        "product: 'What is A times B?', a 3-digit by a 2-digit number (a tool-use task).",
    )
    train_size: int = Field(1000, ge=1, description=f"Number of train tasks (at most {MAX_TRAIN_SIZE:,}).")
    validation_size: int = Field(
        100, ge=1, description=f"Number of validation tasks (at most {MAX_VALIDATION_SIZE:,})."
    )

    @field_validator("train_size", "validation_size")
    @classmethod
    def _bounded(cls, value: int, info: ValidationInfo) -> int:
        limit, why = SIZE_LIMITS[str(info.field_name)]
        if value > limit:
            raise ValueError(f"at most {limit:,} tasks: {why}")
        return value


def make_problem(rng: random.Random, difficulty: Difficulty) -> tuple[str, int, str]:
    """One problem: (story, answer, expression)."""
    if difficulty == "product":
        a, b = rng.randint(*PRODUCT_A), rng.randint(*PRODUCT_B)
        return f"What is {a} times {b}?", a * b, f"{a} * {b}"
    min_ops, max_ops, top, operators = LEVELS[difficulty]
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    value = rng.randint(2, top)
    expression = str(value)
    sentences = [f"{name} has {value} {item}."]
    for _ in range(rng.randint(min_ops, max_ops)):
        op = rng.choice(operators)
        if op == "-" and value < 2:
            op = "+"
        if op == "+":
            n = rng.randint(2, top)
            value += n
            sentences.append(rng.choice([f"Then {name} finds {n} more.", f"Then {name} buys {n} more."]))
        elif op == "-":
            n = rng.randint(1, value - 1)
            value -= n
            sentences.append(f"Then {name} gives {n} of them away.")
        elif op == "*":
            n = rng.randint(2, 5)
            value *= n
            sentences.append(f"Then the number of {item} {name} has becomes {n} times as large.")
        else:
            divisors = [d for d in range(2, 10) if value % d == 0]
            if not divisors:
                n = rng.randint(2, top)
                value += n
                sentences.append(f"Then {name} finds {n} more.")
                expression = f"({expression} + {n})"
                continue
            n = rng.choice(divisors)
            value //= n
            sentences.append(f"Then {name} splits them into {n} equal piles and keeps one pile.")
        expression = f"({expression} {op} {n})"
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), value, expression.removeprefix("(").removesuffix(")")


class ArithReader:
    def __init__(self, settings: ArithReaderSettings) -> None:
        self.settings = settings

    def read(self, split: Split) -> Iterator[Task]:
        s = self.settings
        if split == "train":
            yield from self._generate("train", s.train_size, exclude=set())
        else:
            train_queries = {task.main_query for task in self._generate("train", s.train_size, set())}
            yield from self._generate("validation", s.validation_size, exclude=train_queries)

    def _generate(self, split: str, size: int, exclude: set[str]) -> Iterator[Task]:
        rng = random.Random(f"arith:{self.settings.seed}:{split}:{self.settings.difficulty}")
        seen: set[str] = set()
        produced, attempts = 0, 0
        while produced < size and attempts < size * 50:
            attempts += 1
            story, answer, expression = make_problem(rng, self.settings.difficulty)
            if story in exclude or story in seen:
                continue
            if split != "train":  # train problems may repeat: remembering them would grow with the split
                seen.add(story)
            yield Task(
                task_id=f"arith-{split}-{produced:05d}",
                main_query=story,
                metadata={"answer": str(answer), "expression": expression},
            )
            produced += 1


@hookimpl
def register_readers(register: Register) -> None:
    register(
        "arith",
        ArithReader,
        settings=ArithReaderSettings,
        summary="Built-in seeded arithmetic word problems (no download needed).",
    )
