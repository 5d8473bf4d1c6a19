"""Real experiment folders for the viewer's tests, written by `astuner run --backbone debug`.

A scripted engine (real tokenizer, deterministic replies, log-prob -0.25
per token) drives two workflows registered through a test plugin:

- `calc_agent`: asks the model, which calls the `calculate` tool, gets the
  result back and answers; the second repeat of each task answers wrongly,
  so groups have reward variance. Tasks also cover `<script>` text in model
  output, a generation loop (the `nonsense` madness check) and a workflow
  that raises.
- `long_chat`: 30 user turns with long replies, one merged sample of about
  20k tokens.

`write_hint_run` adds a training-style run with one trajectory whose agent
adds a hint message for one call and removes it again: two samples and a
prefix break between them. `write_werewolf_run` adds one of multi-agent
games, each agent scored by the judge and generating with its own adapter;
`write_werewolf_metrics` gives it the step metrics of such games, per agent.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import astuner_logview.plugin
import yaml
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.core.metrics import rollout_metrics
from astuner.core.task import WorkflowOutput
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker
from astuner.core.trajectory import CallSampling, LLMCall, Trajectory
from astuner.plugins import Plugins
from astuner.rollout.workflow import Workflow
from astuner.testing.conversations import SEARCH_TOOL, echo_assistant, react_turns
from astuner.testing.engines import LOGPROB, ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer

SCRIPT = "<script>window.__pwned = 1</script>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Add up an expression like '2 + 3'.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
TASKS = [
    {"id": "add-1", "question": "What is 2 + 3?", "answer": "5"},
    {"id": "add-2", "question": "What is 40 + 2?", "answer": "42"},
    {"id": "echo", "question": f"Echo this back: {SCRIPT}", "answer": "none"},
    {"id": "sing", "question": "Sing la for me", "answer": "none"},
    {"id": "explode", "question": "explode", "answer": "none"},
]
LONG_TURNS = 30
_PARAGRAPH = (
    "Reinforcement learning trains the policy on its own samples; each reply is scored, "
    "the advantage says how much better than the group it was, and the loss raises the "
    "probability of the tokens that did well. "
)


class CalcWorkflow(Workflow):
    """Ask, run the calculator tool calls the model makes, and answer."""

    async def execute(self, workflow_task, model_tuner):
        task = workflow_task.task
        if task.main_query == "explode":
            raise RuntimeError("the calculator exploded <b>boom</b>")
        question = task.main_query
        if workflow_task.repeat_index:
            question += f" (attempt {workflow_task.repeat_index})"
        messages = [
            {"role": "system", "content": "You are a careful calculator agent."},
            {"role": "user", "content": question},
        ]
        call = await model_tuner.chat(messages, TOOLS)
        while call.tool_calls:
            calls = [c.to_openai() for c in call.tool_calls]
            messages.append({"role": "assistant", "content": call.content, "tool_calls": calls})
            for tool_call in call.tool_calls:
                numbers = re.findall(r"\d+", json.loads(tool_call.arguments)["expression"])
                result = sum(int(n) for n in numbers)
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": str(result)})
            call = await model_tuner.chat(messages, TOOLS)
        answer = re.search(r"answer is (\d+)", call.content)
        return WorkflowOutput(
            response=call.content, metadata={"final_answer": answer.group(1) if answer else call.content}
        )


class LongChatWorkflow(Workflow):
    """Thirty user turns, each answered at length: one long merged sample."""

    async def execute(self, workflow_task, model_tuner):
        messages = [{"role": "system", "content": "You explain things at length."}]
        for turn in range(LONG_TURNS):
            messages.append({"role": "user", "content": f"Turn {turn}: tell me more."})
            call = await model_tuner.chat(messages)
            messages.append({"role": "assistant", "content": call.content})
        return WorkflowOutput(reward=1.0, is_success=True, response=messages[-1]["content"])


def respond(prompt: str) -> str:
    """The scripted model: reads the conversation so far and writes the next reply."""
    last_user = prompt.rsplit("<|im_start|>user\n", 1)[-1]
    if last_user.startswith("Turn "):
        return _PARAGRAPH * 6
    if "<tool_response>" in last_user:
        result = re.findall(r"<tool_response>\n(\d+)", last_user)[-1]
        return f"The answer is {result}."
    if "Echo this back" in last_user:
        return f"You said: {SCRIPT}"
    if "Sing la" in last_user:
        return "la " * 60
    a, b = re.search(r"What is (\d+) \+ (\d+)", last_user).groups()
    if "attempt" in last_user:
        b = str(int(b) + 1)
    call = {"name": "calculate", "arguments": {"expression": f"{a} + {b}"}}
    return f"Let me calculate.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def scripted_plugins(tokenizer_dir: Path) -> Plugins:
    """Kernel defaults plus the scripted engine and the two workflows above."""

    def register_workflows(register):
        register("calc_agent", CalcWorkflow)
        register("long_chat", LongChatWorkflow)

    def register_engines(register):
        def scripted(config):
            engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), respond)
            engine.tokenizer_path = str(tokenizer_dir)
            return engine

        register("scripted", scripted)

    plugins = logview_plugins()
    plugin = SimpleNamespace(
        register_workflows=hookimpl(register_workflows), register_engines=hookimpl(register_engines)
    )
    plugins.add(plugin, name="logview_test")
    return plugins


def logview_plugins() -> Plugins:
    """A plugin manager with the kernel's defaults and this plugin (command and companion `logview`) only."""
    plugins = Plugins(load_entry_points=False)
    plugins.add(astuner_logview.plugin, name="logview")
    return plugins


def debug_config(
    root: Path, tokenizer_dir: Path, name: str, workflow: str, tasks: list[dict], repeat: int
) -> Path:
    """A config for a debug run of `workflow` on `tasks` with the scripted engine; returns its path."""
    tasks_file = root / f"{name}-tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    config = {
        "astuner": {
            "experiment_name": name,
            "experiment_dir": str(root / "launcher_record"),
            "model": {"path": str(tokenizer_dir)},
            "task_reader": {"type": "jsonl", "jsonl": {"validation_file": str(tasks_file), "id_field": "id"}},
            "task_judge": {"judge_protocol": "exact"},
            "rollout": {
                "agentscope_workflow": workflow,
                "engine": "scripted",
                "max_response_length_in_one_turn": 1024,
                "max_model_len": 65536,
            },
            "debug": {"debug_first_n_tasks": len(tasks), "num_repeat": repeat, "debug_max_parallel": 4},
        }
    }
    conf = root / f"{name}.yaml"
    conf.write_text(yaml.safe_dump(config), encoding="utf-8")
    return conf


def debug_run(
    root: Path, tokenizer_dir: Path, name: str, workflow: str, tasks: list[dict], repeat: int
) -> Path:
    """Run `astuner run --backbone debug` on `tasks`; return the run folder it wrote."""
    conf = debug_config(root, tokenizer_dir, name, workflow, tasks, repeat)
    app = make_app(scripted_plugins(tokenizer_dir))
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    (run,) = (root / "launcher_record" / name).iterdir()
    return run


HINT = {"role": "user", "content": "Now reply with a JSON object that matches the schema."}


def hint_trajectory() -> Trajectory:
    """Three ReAct calls through the real tracker; the second sees a hint that the third no longer does."""
    tokenizer = ChatTokenizer(qwen25_tokenizer())
    tracker = ContextTracker(tokenizer)
    messages = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "What is the answer?"},
    ]
    for k, turn in enumerate(react_turns(tokenizer, 3)):
        if k == 1:
            messages.append(dict(HINT))
        if k == 2:
            messages.remove(HINT)
        prepared = tracker.prepare(messages, [SEARCH_TOOL])
        call = tracker.record(prepared, turn.ids, [LOGPROB] * len(turn.ids))
        messages.append(echo_assistant(call, "default"))
        for tool_call in call.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": turn.tool_output})
    return tracker.trajectory("hint-1", task_id="hint", group_id="g", reward=1.0, is_success=True)


def write_hint_run(root: Path, source: Path) -> Path:
    """`root/hint/<run>` with `source`'s config (its tokenizer) and `hint_trajectory()` as step 1."""
    run = root / "hint" / "20260103-040506"
    (run / "rollouts").mkdir(parents=True)
    shutil.copy(source / "config.yaml", run / "config.yaml")
    (run / "rollouts" / "step_1.jsonl").write_text(
        hint_trajectory().model_dump_json() + "\n", encoding="utf-8"
    )
    return run


ADAPTERS = {"wolf": "wolf-lora", "seer": "seer-lora", "villager": None}
# Per game: its group and each playing agent's reward. Group g2 has no wolf, and its seer wins both games.
GAMES = [
    ("g1", {"wolf": 1.1, "seer": 0.0, "villager": 0.0}),
    ("g1", {"wolf": 0.0, "seer": 1.0, "villager": 1.0}),
    ("g1", {"wolf": 0.5, "seer": 0.5, "villager": 0.0}),
    ("g2", {"seer": 1.0, "villager": 0.0}),
    ("g2", {"seer": 1.0, "villager": 1.0}),
]


def werewolf_trajectory(number: int, group: str, rewards: dict[str, float]) -> Trajectory:
    """Two rounds in which each agent speaks once; an agent's second prompt extends its first call,
    so each agent makes one sample. The reward is the mean of the agents' rewards."""
    encode = qwen25_tokenizer().encode
    calls: list[LLMCall] = []
    last: dict[str, list[int]] = {}
    for day in range(2):
        for agent in rewards:
            question = f"Day {day}: {agent}, who is the wolf?"
            reply = f"I am the {agent} and I suspect player {number + day}."
            prompt = last.get(agent, []) + encode(("\n" if day else "") + question)
            response = encode(reply)
            last[agent] = prompt + response
            calls.append(
                LLMCall(
                    index=len(calls),
                    agent_name=agent,
                    messages=[{"role": "user", "content": question}],
                    prompt_ids=prompt,
                    response_ids=response,
                    response_logprobs=[-0.5] * len(response),
                    sampling=CallSampling(temperature=1.0, adapter=ADAPTERS[agent]),
                    text=reply,
                    content=reply,
                    prompt_source="cumulative" if day else "template",
                )
            )
    return Trajectory(
        trajectory_id=f"game-{number}",
        task_id=f"village-{group}",
        group_id=group,
        calls=calls,
        reward=sum(rewards.values()) / len(rewards),
        agent_rewards=rewards,
        is_success=rewards.get("wolf", 0.0) > 0.5,
    )


def write_werewolf_run(root: Path, source: Path) -> Path:
    """`root/werewolf/<run>` with `source`'s config (its tokenizer) and the `GAMES` as step 1."""
    run = root / "werewolf" / "20260104-050607"
    (run / "rollouts").mkdir(parents=True)
    shutil.copy(source / "config.yaml", run / "config.yaml")
    lines = [
        werewolf_trajectory(k, group, rewards).model_dump_json() + "\n"
        for k, (group, rewards) in enumerate(GAMES)
    ]
    (run / "rollouts" / "step_1.jsonl").write_text("".join(lines), encoding="utf-8")
    return run


def write_werewolf_metrics(run: Path, steps: int = 3) -> list[dict[str, float]]:
    """`run/metrics.jsonl`: `steps` training steps scored as training scores them
    (`rollout_metrics`) over the `GAMES`, whose judge reports per agent a share
    (`agent/<agent>/fallback_share`, falling step by step) and a count
    (`agent/<agent>/choices`), and `village_won`; the last step validates too."""
    rows = []
    for step in range(1, steps + 1):
        games = []
        for k, (group, rewards) in enumerate(GAMES):
            game = werewolf_trajectory(k, group, rewards)
            for agent in rewards:
                game.metrics[f"agent/{agent}/fallback_share"] = (k % 2 + 1) / (2 * step)
                game.metrics[f"agent/{agent}/choices"] = 2.0
            game.metrics["village_won"] = float(rewards["seer"] > 0.5)
            games.append(game)
        row = {"step": step, **rollout_metrics(games, "train")}
        if step == steps:
            row.update(rollout_metrics(games[:1], "val"))
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows
