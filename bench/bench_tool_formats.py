"""Which tool rendering makes SmolLM2-135M-Instruct call its tool? Measured, not guessed.

SmolLM2's chat template renders no tools, so `model.tool_format: auto`
falls back to astuner's `hermes` format (see astuner.core.toolformat).
This script samples first replies of the math ReAct example on `arith`
questions (the example's system prompt, its `execute_python_code` tool and
its `model.tool_demonstration`, read from examples/math_agent) under
several renderings, and counts the replies holding a tool call that the
`hermes` parser reads, and those that imitate a tool result instead:

- `template`: the chat template alone (the tool list never reaches the model);
- `hermes`: astuner's tool section in the system turn, no demonstration;
- `hermes+1 demo`: plus the example's first worked exchange;
- `hermes+2 demos`: plus both of the example's exchanges (what the example runs);
- `hermes+2 demos, tagged results`: results wrapped in `<tool_result>` tags
  instead of the plain `Result of <tool>:` turn (the rejected alternative).

    .venv/bin/python bench/bench_tool_formats.py                   # 3 questions x 6 samples, ~10 min
    .venv/bin/python bench/bench_tool_formats.py --questions 8 --samples 8
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import re
import time
from pathlib import Path
from typing import Any

import torch
from agentscope.tool import Toolkit
from astuner_backbone_torch.models import resolve_model_dir
from transformers import AutoModelForCausalLM

from astuner.config import load_config
from astuner.core.chat import Message, normalize_messages
from astuner.core.tokenizer import load_tokenizer
from astuner.core.toolcalls import get_tool_parser
from astuner.core.toolformat import ToolFormat
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "math_agent"
_RESULT = re.compile(r"^Result of ([^:\n]*):\n(.*)$", re.DOTALL)


def example_parts() -> tuple[str, dict[str, Any], list[dict[str, Any]], str]:
    """The example's system prompt, tool schema, demonstration and model."""
    spec = importlib.util.spec_from_file_location("math_agent_workflow", EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    workflow = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workflow)
    toolkit = Toolkit()
    toolkit.register_tool_function(workflow.execute_python_code)
    (tool,) = toolkit.get_json_schemas()
    config = load_config(EXAMPLE / "math_agent_arith.yaml", for_training=False)  # rollouts only
    return workflow.SYSTEM_PROMPT, tool, config.model.tool_demonstration, config.model.path


def tagged_results(msgs: list[Message]) -> list[Message]:
    """The `hermes` rendering with each result as `<tool_result name=...>...</tool_result>`."""
    out = []
    for m in msgs:
        found = _RESULT.match(m["content"]) if m["role"] == "user" else None
        if found:
            name, result = found.groups()
            m = {"role": "user", "content": f'<tool_result name="{name}">{result}</tool_result>'}
        out.append(m)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--temperature", type=float, default=0.7, help="the example's rollout temperature")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()

    system, tool, demo, model_path = example_parts()
    demo = normalize_messages(demo)
    variants = {
        "template": (ToolFormat("template", "hermes"), None),
        "hermes": (ToolFormat("hermes", "hermes"), None),
        "hermes+1 demo": (ToolFormat("hermes", "hermes", tuple(demo[:4])), None),
        "hermes+2 demos": (ToolFormat("hermes", "hermes", tuple(demo)), None),
        "hermes+2 demos, tagged results": (ToolFormat("hermes", "hermes", tuple(demo)), tagged_results),
    }
    tokenizer = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(model_path), dtype=torch.float32).eval()
    reader = ArithReader(ArithReaderSettings(difficulty="easy", seed=0))
    questions = [t.main_query for t in itertools.islice(reader.read("validation"), args.questions)]
    parse = get_tool_parser("hermes")
    print(f"{args.questions} arith questions x {args.samples} samples, temperature {args.temperature}")
    print(f"{'rendering':32} {'replies':>7} {'calls':>6} {'rate':>5} {'imitated result':>16} {'s':>6}")
    for name, (fmt, rewrite) in variants.items():
        torch.manual_seed(0)
        began = time.perf_counter()
        replies = calls = imitated = 0
        for question in questions:
            messages = normalize_messages(
                [{"role": "system", "content": system}, {"role": "user", "content": question}]
            )
            msgs, tools = fmt.apply(messages, [tool])
            if rewrite is not None:
                msgs = rewrite(msgs)
            prompt = tokenizer.encode(tokenizer.render(msgs, tools, add_generation_prompt=True))
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([prompt]),
                    do_sample=True,
                    temperature=args.temperature,
                    max_new_tokens=args.max_new_tokens,
                    num_return_sequences=args.samples,
                    pad_token_id=tokenizer.eos_token_id,
                    eos_token_id=sorted(tokenizer.stop_token_ids),
                )
            for row in out[:, len(prompt) :].tolist():
                text = tokenizer.decode([i for i in row if i not in tokenizer.stop_token_ids])
                replies += 1
                calls += bool(parse(text).tool_calls)
                imitated += "<tool_result" in text or "Result of" in text or "<returncode>" in text
        took = time.perf_counter() - began
        rate = calls / replies
        print(f"{name:32} {replies:>7} {calls:>6} {rate:>5.2f} {imitated:>16} {took:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
