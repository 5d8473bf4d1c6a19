"""Which tool format makes SmolLM2-135M-Instruct call its tools? Measured, not guessed.

SmolLM2's chat template renders no tools, so `model.tool_format: auto`
falls back to astuner's `hermes` format (see astuner.core.toolformat).
This script samples first replies of the math ReAct example (its system
prompt and its `execute_python_code` tool, arithmetic questions from the
built-in `arith` reader) under several renderings and counts the replies
that hold a tool call the `hermes` parser reads, and among them the calls
whose code prints something:

- `template`: the chat template alone (the tool list never reaches the model);
- `hermes`: astuner's tool section in the system turn, no demonstration;
- `hermes+demo`: the same plus one demonstration exchange (question, call,
  result, answer), the tool result as a `user` turn `<tool_result ...>`;
- `hermes+demo/tool-role`: the demonstration's result as a ChatML `tool` turn instead.

    .venv/bin/python bench/bench_tool_formats.py              # 8 questions x 8 samples, ~2 min
    .venv/bin/python bench/bench_tool_formats.py --questions 4 --samples 4
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from astuner_backbone_torch.models import resolve_model_dir
from transformers import AutoModelForCausalLM

from astuner.core.chat import Message, normalize_messages
from astuner.core.tokenizer import load_tokenizer
from astuner.core.toolcalls import get_tool_parser
from astuner.core.toolformat import ToolFormat
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings

MODEL = "builtin:smollm2-135m-instruct"
SYSTEM = (
    "You are an agent specialized in solving math problems with tools.\n"
    "Please solve the math problem given to you.\n"
    "You can write and execute Python code to perform calculation or verify your answer.\n"
    "You should return your final answer within \\boxed{}."
)
TOOL = {
    "type": "function",
    "function": {
        "name": "execute_python_code",
        "description": "Execute the given python code and capture the return code, standard output "
        "and error. Note you must `print` the output to get the result.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to be executed."}},
            "required": ["code"],
        },
    },
}
DEMONSTRATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 17 * 23?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "demo_0",
                "type": "function",
                "function": {"name": "execute_python_code", "arguments": '{"code": "print(17 * 23)"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "demo_0",
        "name": "execute_python_code",
        "content": "<returncode>0</returncode><stdout>391\n</stdout><stderr></stderr>",
    },
    {"role": "assistant", "content": "17 * 23 = 391, so the answer is \\boxed{391}."},
]


def variants() -> dict[str, ToolFormat]:
    demo = tuple(normalize_messages(DEMONSTRATION))
    return {
        "template": ToolFormat("template", "hermes"),
        "hermes": ToolFormat("hermes", "hermes"),
        "hermes+demo": ToolFormat("hermes", "hermes", demo),
        "hermes+demo/tool-role": ToolFormat("hermes", "hermes", demo),
    }


def as_tool_role(msgs: list[Message]) -> list[Message]:
    """The `hermes` rendering, but tool results kept as ChatML `tool` turns."""
    out = []
    for m in msgs:
        content = m["content"]
        if m["role"] == "user" and content.startswith("<tool_result"):
            out.append({"role": "tool", "content": content[content.index(">") + 1 : -len("</tool_result>")]})
        else:
            out.append(m)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7, help="0: greedy, one reply per question")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--only", nargs="*", help="measure these formats only")
    args = ap.parse_args()

    torch.manual_seed(0)
    tokenizer = load_tokenizer(MODEL)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(MODEL), dtype=torch.float32).eval()
    reader = ArithReader(ArithReaderSettings(difficulty="easy", seed=0))
    questions = [t.main_query for _, t in zip(range(args.questions), reader.read("train"), strict=False)]
    parse = get_tool_parser("hermes")
    print(f"{args.questions} questions x {args.samples} samples, temperature {args.temperature}")
    print(f"{'format':24} {'replies':>8} {'tool calls':>11} {'rate':>6} {'prints':>7} {'s':>6}")
    for name, fmt in variants().items():
        if args.only and name not in args.only:
            continue
        began = time.perf_counter()
        calls = prints = replies = 0
        for question in questions:
            messages = normalize_messages(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
            )
            msgs, tools = fmt.apply(messages, [TOOL])
            if name.endswith("tool-role"):
                msgs = as_tool_role(msgs)
            prompt = tokenizer.encode(tokenizer.render(msgs, tools, add_generation_prompt=True))
            greedy = args.temperature == 0
            sampling = (
                {"do_sample": False} if greedy else {"do_sample": True, "temperature": args.temperature}
            )
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([prompt]),
                    **sampling,
                    max_new_tokens=args.max_new_tokens,
                    num_return_sequences=1 if greedy else args.samples,
                    pad_token_id=tokenizer.eos_token_id,
                    eos_token_id=sorted(tokenizer.stop_token_ids),
                )
            for row in out[:, len(prompt) :].tolist():
                replies += 1
                parsed = parse(tokenizer.decode([i for i in row if i not in tokenizer.stop_token_ids]))
                good = [
                    c for c in parsed.tool_calls if c.name == "execute_python_code" and "print" in c.arguments
                ]
                calls += bool(parsed.tool_calls)
                prints += bool(good)
        took = time.perf_counter() - began
        print(
            f"{name:24} {replies:>8} {calls:>11} {calls / replies:>6.2f} {prints:>7} {took:>6.1f}", flush=True
        )


if __name__ == "__main__":
    main()
