"""Write demonstrations.jsonl: one worked exchange per training question, for `astuner sft`.

Each line is one conversation in the OpenAI format, `{"messages": [...],
"tools": TOOLS}`: the workflow's own system prompt and tools, the question,
a find_owner call and its result, a find_city call and its result, and the
answer. The tools themselves write the results, so every demonstration is
right; only training questions are used, so the validation split stays
unseen.

    python own_task/make_demonstrations.py            # all 28 training questions
    python own_task/make_demonstrations.py --count 8  # the first 8
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tools import TOOLS, find_city, find_owner
from workflow import SYSTEM_PROMPT

HERE = Path(__file__).resolve().parent


def call(index: int, name: str, argument: str, value: str) -> dict[str, Any]:
    """An assistant turn that calls tool `name` with one argument."""
    arguments = json.dumps({argument: value})
    function = {"name": name, "arguments": arguments}
    tool_call = {"id": f"call_{index}", "type": "function", "function": function}
    return {"role": "assistant", "content": "", "tool_calls": [tool_call]}


def result(index: int, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{index}", "name": name, "content": content}


def conversation(row: dict[str, Any]) -> dict[str, Any]:
    """The exchange a good agent has for one row of the training file."""
    pet = row["question"].removeprefix("Which city does the owner of ").removesuffix(" live in?")
    owner = find_owner(pet)
    city = find_city(owner)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": row["question"]},
        call(0, "find_owner", "pet", pet),
        result(0, "find_owner", owner),
        call(1, "find_city", "person", owner),
        result(1, "find_city", city),
        {"role": "assistant", "content": f"{pet}'s owner, {owner}, lives in {city}."},
    ]
    return {"messages": messages, "tools": TOOLS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=None, help="only the first N questions (default: all)")
    count = parser.parse_args().count
    rows = [json.loads(line) for line in (HERE / "pets_train.jsonl").read_text().splitlines() if line]
    rows = rows[:count]
    out = HERE / "demonstrations.jsonl"
    out.write_text("".join(json.dumps(conversation(row)) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} demonstrations to {out}")


if __name__ == "__main__":
    main()
