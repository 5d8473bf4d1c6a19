"""TRL's side of bench/bench_agentic.py: GRPO on the tool agent task with `GRPOTrainer(tools=[multiply])`.

Run inside the TRL venv of bench/trl_env.py (`trl_python()`), on a model folder from
`trl_env.tool_model_dir()` (SmolLM2-135M-Instruct with TRL's Qwen2.5 tool template):

    python bench/agentic_trl.py --model DIR --steps 30 --prompts 8 --generations 4 --max-tokens 128 \\
        --lr 2e-5 --seed 0 --tasks tasks.json --save-steps 10,20,30 --out OUT

What is compared: astuner trains examples/tool_agent (a question "What is A times B?", a `multiply`
tool, at most MAX_TURNS model calls, reward 1 when the last integer of the final reply is A*B); this
script trains the same model on the same prompts, in the same order, with TRL 1.16's own agent loop:
the model's tool calls are parsed by TRL, run (`multiply` from examples/tool_agent/workflow.py), their
results appended as tool turns, and the model asked again, for at most MAX_TURNS - 1 rounds of tool
calls (`max_tool_calling_iterations`). Same group size, learning rate (constant, AdamW without weight
decay), gradient clipping 1.0, temperature 1.0, no KL (beta 0), a token-mean loss (TRL's `dapo`),
float32 weights on CPU (with `--bf16`, bfloat16 autocast over them), gradient checkpointing off.
One difference is TRL's by design:
`--max-tokens` is TRL's `max_completion_length`, the budget of the whole episode (every reply plus
the tool results between them), where astuner's `max_response_length_in_one_turn` bounds each reply.

tasks.json (written by `write_tasks`, so both sides see the same prompts in the same order):

    {"demonstration": [...OpenAI messages...],      # model.tool_demonstration, may be []
     "steps": [[{"messages": [system, user], "answer": "15244"}, ...],   # --prompts per step
               ...]}                                                    # at least --steps steps

The demonstration goes right after the system message, where astuner puts it. Before training the
script renders the first prompt (and a tool-result turn) both through TRL and through astuner's
ContextTracker and prints whether the token ids are equal (a `CHECK` line); it stops if they are not
(unless --allow-token-mismatch).

Printed, one `STEP {json}` line per optimizer step (also OUT/steps.jsonl): step, reward (mean),
episodes_with_tool_call (episodes with at least one parsed tool call / episodes),
tool_calls_per_reply (parsed tool calls / assistant replies), both as astuner's
`astuner.core.metrics.tool_metrics` defines them, calls_written_per_episode (parsed
calls, including a last reply's calls that are never run), calls_run_per_episode,
tool_calls_per_episode and tool_failure_frequency (TRL's own `tools/call_frequency`: run calls per
episode, and `tools/failure_frequency`: failed / run calls), failed_calls_per_episode,
parse_failures_per_episode (replies with `<tool_call>` text TRL could not parse, which it keeps as
plain text), turns_mean, trl_reward, completion_tokens (TRL's mean, model tokens only),
clipped_ratio, step_s, gen_s (time in `model.generate`). `SAMPLE` lines show --show completions per
step (those with a tool call first) as the model saw them. The HF model is saved at --save-steps
into OUT/step_<n>, with the input folder's tokenizer and config files.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from trl_env import time_generate

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "examples" / "tool_agent" / "workflow.py"
CONFIGS = ("config.json", "generation_config.json")


# ---------------------------------------------------------------- the task, shared with astuner


def task_module() -> ModuleType:
    """examples/tool_agent/workflow.py (SYSTEM_PROMPT, TOOLS, MAX_TURNS, multiply, last_integer)."""
    spec = importlib.util.spec_from_file_location("tool_agent_workflow", WORKFLOW)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_tasks(
    path: Path,
    batches: Sequence[Sequence[tuple[str, str]]],
    system_prompt: str,
    demonstration: Sequence[dict[str, Any]] = (),
) -> None:
    """tasks.json for this script: `batches` is one list of (question, answer) per step, in order."""
    steps = [
        [
            {
                "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": q}],
                "answer": str(a),
            }
            for q, a in batch
        ]
        for batch in batches
    ]
    payload = {"demonstration": list(demonstration), "steps": steps}
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


def read_tasks(
    path: Path, steps: int, prompts: int
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The demonstration and the first `steps` steps of tasks.json, each of `prompts` tasks."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    demonstration, batches = payload.get("demonstration") or [], payload["steps"][:steps]
    if len(batches) < steps or any(len(b) != prompts for b in batches):
        sizes = [len(b) for b in batches]
        raise SystemExit(f"{path}: need {steps} steps of {prompts} prompts, found {sizes}")
    return demonstration, batches


def with_demonstration(messages: list[dict[str, Any]], demonstration: list[dict[str, Any]]) -> list[dict]:
    """The demonstration right after the system message, as astuner's ToolFormat.apply puts it."""
    at = 1 if messages and messages[0]["role"] == "system" else 0
    return [*messages[:at], *demonstration, *messages[at:]]


def trl_tool(fn: Callable[..., Any], schema: dict[str, Any]) -> Callable[..., Any]:
    """`fn` as TRL is given it: the JSON schema transformers derives from it must be `schema` (TOOLS[0]).

    transformers' `get_json_schema` adds a `"return"` entry for a return annotation, which the
    OpenAI-style TOOLS astuner renders has not (10 more prompt tokens); the wrapper has no return
    annotation, so both render the same tool list.
    """
    from transformers.utils import get_json_schema

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    tool.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "return"}
    derived = get_json_schema(tool)
    if derived != schema:
        raise SystemExit(f"TRL would render the tool as {derived}, astuner as {schema}")
    return tool


def final_text(completion: list[dict[str, Any]]) -> str:
    """The content of the final assistant message of an episode ("" if it ends on a tool result)."""
    last = completion[-1] if completion else {}
    return str(last.get("content") or "") if last.get("role") == "assistant" else ""


# ---------------------------------------------------------------- token equality with astuner


def check_same_tokens(
    trainer: Any, model_dir: str, messages: list[dict], demonstration: list[dict], tools: list[dict]
) -> dict[str, Any]:
    """Render the first prompt and a tool-result turn through TRL and through astuner; compare ids.

    TRL: its own `_tokenize_prompts` on the dataset row (after the Arrow round trip) and
    `_get_tool_suffix_ids`. astuner: a ContextTracker as the rollout builds it (`model.tool_format:
    auto`, the demonstration), then a continuing call in `cumulative` mode.
    """
    from astuner.core.tokenizer import load_tokenizer
    from astuner.core.tracker import ContextTracker, TrackerSettings

    tokenizer = trainer.processing_class
    trl_prompt = trainer._tokenize_prompts([trainer.train_dataset[0]["prompt"]])[0][0]
    tracker = ContextTracker(
        load_tokenizer(model_dir), TrackerSettings(tool_demonstration=tuple(demonstration))
    )
    first = tracker.prepare(messages, tools)
    arguments = {"a": 123, "b": 45}
    call_text = f'<tool_call>\n{{"name": "multiply", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
    reply = [*tokenizer(call_text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    tracker.record(first, reply)
    result = str(arguments["a"] * arguments["b"])
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "multiply", "arguments": json.dumps(arguments)},
    }
    second = tracker.prepare(
        [
            *messages,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "name": "multiply", "content": result},
        ],
        tools,
    )
    astuner_suffix = second.prompt_ids[len(first.prompt_ids) + len(reply) :]
    trl_suffix = trainer._get_tool_suffix_ids([{"role": "tool", "name": "multiply", "content": result}])
    out = {
        "tool_format": tracker.tool_format.name,
        "prompt_equal": trl_prompt == first.prompt_ids,
        "prompt_tokens": {"trl": len(trl_prompt), "astuner": len(first.prompt_ids)},
        "tool_turn_equal": trl_suffix == astuner_suffix,
        "astuner_tool_turn_source": second.prompt_source,
        "tool_turn_text": tokenizer.decode(trl_suffix),
    }
    if not out["prompt_equal"]:
        pairs = zip(trl_prompt, first.prompt_ids, strict=False)
        at = next(
            (i for i, (x, y) in enumerate(pairs) if x != y), min(len(trl_prompt), len(first.prompt_ids))
        )
        out["prompt_first_difference"] = {
            "trl": tokenizer.decode(trl_prompt[at : at + 24]),
            "astuner": tokenizer.decode(first.prompt_ids[at : at + 24]),
        }
    if not out["tool_turn_equal"]:
        out["astuner_tool_turn_text"] = tokenizer.decode(astuner_suffix)
    return out


# ---------------------------------------------------------------- training


def _is_error(message: dict[str, Any]) -> bool:
    return str(message.get("content", "")).startswith("{'error'")


def _unparsed(message: dict[str, Any]) -> bool:
    return not message.get("tool_calls") and "<tool_call>" in str(message.get("content", ""))


class EpisodeStats:
    """Per-step episode figures, gathered by the reward function from TRL's completions."""

    def __init__(self, tokenizer: Any, last_integer: Callable[[str], str], show: int) -> None:
        self.tokenizer, self.last_integer, self.show = tokenizer, last_integer, show
        self.current: dict[str, Any] = {}

    def reward(self, completions: list, answer: list, completion_ids: list, **_: Any) -> list[float]:
        pairs = zip(completions, answer, strict=True)
        rewards = [1.0 if self.last_integer(final_text(c)) == a else 0.0 for c, a in pairs]
        results = [[m for m in c if m.get("role") == "tool"] for c in completions]
        replies = [[m for m in c if m.get("role") == "assistant"] for c in completions]
        written = [sum(len(m.get("tool_calls") or []) for m in r) for r in replies]
        n = len(completions)
        n_replies = sum(len(r) for r in replies)
        self.current = {
            "reward": sum(rewards) / n,
            # as astuner's tool_metrics: episodes holding a parsed call / episodes, and
            # parsed calls / replies over the whole step (a reply with two calls counts two)
            "episodes_with_tool_call": sum(w > 0 for w in written) / n,
            "tool_calls_per_reply": sum(written) / n_replies if n_replies else 0.0,
            # parsed calls, including those of a last reply that TRL leaves unrun (as astuner counts)
            "calls_written_per_episode": sum(written) / n,
            "calls_run_per_episode": sum(len(r) for r in results) / n,
            # a run call that raised: TRL's result is str({"error": ...})
            "failed_calls_per_episode": sum(_is_error(m) for r in results for m in r) / n,
            # a reply with <tool_call> text that TRL could not parse: it falls back to plain text
            "parse_failures_per_episode": sum(_unparsed(m) for r in replies for m in r) / n,
            "turns_mean": sum(len(r) for r in replies) / n,
        }
        with_call = [i for i, r in enumerate(results) if r][
            : self.show
        ]  # shown first: episodes with a tool run
        for i in with_call or list(range(min(self.show, len(completions)))):
            sample = {"answer": answer[i], "reward": rewards[i], "messages": completions[i]}
            sample["text"] = self.tokenizer.decode(completion_ids[i], skip_special_tokens=False)
            print("SAMPLE " + json.dumps(sample, ensure_ascii=False, default=str), flush=True)
        return rewards


class Setup(NamedTuple):
    trainer: Any  # trl.GRPOTrainer
    stats: EpisodeStats
    demonstration: list[dict[str, Any]]
    batches: list[list[dict[str, Any]]]
    task: ModuleType


def build_trainer(args: argparse.Namespace) -> Setup:
    """The GRPOTrainer of this comparison, not yet trained (see the module doc for its settings)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    task = task_module()
    demonstration, batches = read_tasks(args.tasks, args.steps, args.prompts)
    rows = [
        {"prompt": with_demonstration(t["messages"], demonstration), "answer": t["answer"]}
        for batch in batches
        for t in batch
    ]
    tool = trl_tool(task.multiply, task.TOOLS[0])
    micro = args.micro_batch or args.prompts
    if (args.prompts * args.generations) % micro:
        raise SystemExit(f"--micro-batch {micro} must divide prompts x generations")
    config = GRPOConfig(
        output_dir=str(args.out / "trl"),
        use_cpu=True,
        bf16=args.bf16,  # autocast over float32 weights, as astuner's bfloat16 update
        fp16=False,
        seed=args.seed,
        # one optimizer step per prompts x generations completions, generated in one batch
        # (steps_per_generation defaults to gradient_accumulation_steps): the RepeatSampler yields
        # `prompts` distinct rows (dataset order, no shuffle) `generations` times each; the dapo loss
        # divides by the tokens of the whole batch, so the micro-batch size changes memory, not the loss
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=args.prompts * args.generations // micro,
        num_generations=args.generations,
        num_iterations=1,
        max_completion_length=args.max_tokens,
        max_tool_calling_iterations=task.MAX_TURNS - 1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        shuffle_dataset=False,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    stats = EpisodeStats(tokenizer, task.last_integer, args.show)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=stats.reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        tools=[tool],
    )
    return Setup(trainer, stats, demonstration, batches, task)


def train(args: argparse.Namespace) -> None:
    from transformers import TrainerCallback

    trainer, stats, demonstration, batches, task = build_trainer(args)
    check = check_same_tokens(trainer, args.model, batches[0][0]["messages"], demonstration, task.TOOLS)
    print("CHECK " + json.dumps(check, ensure_ascii=False), flush=True)
    if not (check["prompt_equal"] and check["tool_turn_equal"]) and not args.allow_token_mismatch:
        raise SystemExit("TRL and astuner would feed the model different tokens (the CHECK line above)")

    model = trainer.model
    timing = time_generate(model)
    save_steps = {int(s) for s in args.save_steps.split(",") if s.strip()}
    args.out.mkdir(parents=True, exist_ok=True)
    records = (args.out / "steps.jsonl").open("w", encoding="utf-8")

    class Report(TrainerCallback):
        def __init__(self) -> None:
            self.last = time.perf_counter()
            self.step_s = 0.0

        def on_step_end(self, _args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.step_s = time.perf_counter() - self.last
            if state.global_step in save_steps:
                folder = args.out / f"step_{state.global_step}"
                trainer.accelerator.unwrap_model(trainer.model).save_pretrained(str(folder))
                # The input folder's own tokenizer files (not the tokenizer TRL gave a response template)
                # and configs (TRL turned the model's use_cache off for training).
                for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", *CONFIGS):
                    if (Path(args.model) / name).exists():
                        shutil.copy2(Path(args.model) / name, folder / name)

        def on_log(self, _args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            logs = logs or {}
            if "loss" not in logs and "reward" not in logs:
                return  # the final train summary
            record = {
                "step": state.global_step,
                **{k: round(v, 4) if isinstance(v, float) else v for k, v in stats.current.items()},
                "trl_reward": logs.get("reward"),
                "tool_calls_per_episode": logs.get("tools/call_frequency"),
                "tool_failure_frequency": logs.get("tools/failure_frequency"),
                "completion_tokens": logs.get("completions/mean_length"),
                "clipped_ratio": logs.get("completions/clipped_ratio"),
                "step_s": round(self.step_s, 2),
                "gen_s": round(timing["gen"], 2),
            }
            print("STEP " + json.dumps(record), flush=True)
            records.write(json.dumps(record) + "\n")
            records.flush()
            timing["gen"] = 0.0
            self.last = time.perf_counter()

    trainer.add_callback(Report())
    trainer.train()
    records.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="HF model folder (trl_env.tool_model_dir()).")
    parser.add_argument("--steps", type=int, required=True, help="Optimizer steps.")
    parser.add_argument("--prompts", type=int, default=8, help="Prompts per step.")
    parser.add_argument("--generations", type=int, default=4, help="Completions per prompt (group size).")
    parser.add_argument("--max-tokens", type=int, default=128, help="TRL's max_completion_length.")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", type=Path, required=True, help="tasks.json (see the module doc).")
    parser.add_argument("--save-steps", default="", help="Comma-separated steps to save OUT/step_<n> at.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--micro-batch", type=int, default=0, help="Sequences per forward/backward (0: --prompts)."
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores).")
    parser.add_argument(
        "--bf16", action="store_true", help="TRL's bf16=True (float32 weights, bf16 autocast)."
    )
    parser.add_argument(
        "--allow-token-mismatch",
        action="store_true",
        help="Train even when TRL's prompt or tool-turn ids differ from astuner's (CHECK line).",
    )
    parser.add_argument("--show", type=int, default=1, help="Completions to print per step (SAMPLE lines).")
    train(parser.parse_args())


if __name__ == "__main__":
    main()
