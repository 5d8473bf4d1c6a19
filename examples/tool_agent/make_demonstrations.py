"""Write demonstrations.jsonl: worked tool-use exchanges for a supervised warm start.

A 135M model that has never called a tool gives RL nothing to reinforce:
all rewards 0, no gradient. A short supervised pass on correct exchanges
(`astuner sft --conf examples/tool_agent/tool_agent.yaml --from
examples/tool_agent/demonstrations.jsonl`) teaches the shape first. Each
line is one OpenAI-format conversation, `{"messages": [system, user,
assistant with a multiply call, tool result, final answer], "tools": TOOLS}`,
with the workflow's own SYSTEM_PROMPT, TOOLS and `multiply`, and the final
answer in the form of the config's demonstration ("A times B is C.").

The problems come from their own random stream and none is a train or
validation task of the config's reader, nor one of its demonstration's
questions, so a warm-started model is never evaluated on what it was shown.

    .venv/bin/python examples/tool_agent/make_demonstrations.py              # 64 lines
    .venv/bin/python examples/tool_agent/make_demonstrations.py --count 256 --out /tmp/demos.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import yaml
from workflow import SYSTEM_PROMPT, TOOLS, multiply

from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings, make_problem

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "tool_agent.yaml"


def reserved_questions(config_path: Path = CONFIG) -> set[str]:
    """The config's train and validation questions and its demonstration's questions."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))["astuner"]
    reader = ArithReader(ArithReaderSettings.model_validate(config["task_reader"]["arith"]))
    questions = {task.main_query for split in ("train", "validation") for task in reader.read(split)}
    questions |= {m["content"] for m in config["model"]["tool_demonstration"] if m["role"] == "user"}
    return questions


def conversation(a: int, b: int) -> dict[str, Any]:
    """One worked exchange: the question, the call, its result, the answer."""
    product = multiply(a, b)
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "multiply", "arguments": json.dumps({"a": a, "b": b})},
    }
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"What is {a} times {b}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "multiply", "content": str(product)},
        {"role": "assistant", "content": f"{a} times {b} is {product}."},
    ]
    return {"messages": messages, "tools": TOOLS}


def demonstrations(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` exchanges on distinct product problems that no reader split holds."""
    reserved = reserved_questions()
    rng = random.Random(f"tool_agent:demonstrations:{seed}")  # not the reader's stream
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < count:
        question, _, expression = make_problem(rng, "product")
        if question in reserved or question in seen:
            continue
        seen.add(question)
        a, b = (int(n) for n in expression.split(" * "))
        out.append(conversation(a, b))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=64, help="number of conversations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "demonstrations.jsonl")
    args = parser.parse_args()
    lines = [json.dumps(d, ensure_ascii=False) for d in demonstrations(args.count, args.seed)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} conversations to {args.out}")


if __name__ == "__main__":
    main()
