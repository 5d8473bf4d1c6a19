"""What the auxiliary-model tests share: a workflow and judge module, two scripted engines as plugins.

Used by the kernel's tests and by astuner-executor-ray's (the same run with
the workflow in a Ray worker).

The main model (engine `solver`) and the auxiliary `critic` (engine
`critic`) are scripted engines registered as plugins, each on its own
tokenizer folder, so every call goes through the real stack: config, plugin
manager, runner, context trackers, gateway and the judge adapter.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from astuner import hookimpl
from astuner.config import AstunerConfig, load_config
from astuner.core.task import Task
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.plugins import Plugins
from astuner.rollout.engine import Generation, SamplingParams
from astuner.rollout.engine_model import EngineModel
from astuner.rollout.stack import rollout_stack
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer

# Written next to the config: the workflow and the judge, both function forms.
FLOW = """
from astuner import JudgeOutput, WorkflowOutput


async def workflow(task, model, auxiliary_models=None):
    answer = await model.chat([{"role": "user", "content": task["main_query"]}])
    critic = auxiliary_models["critic"]
    review = await critic.chat([{"role": "user", "content": "Review: " + answer.content}])
    client = critic.openai_client()
    again = await client.chat.completions.create(
        model="critic", messages=[{"role": "user", "content": "Again: " + answer.content}]
    )
    return WorkflowOutput(
        response=answer.content,
        metadata={"review": review.content, "again": again.choices[0].message.content},
    )


async def judge(task, response, auxiliary_models=None):
    question = f"Is {response} the answer to {task['main_query']}?"
    verdict = await auxiliary_models["critic"].chat([{"role": "user", "content": question}])
    correct = verdict.content == "<Correct>"
    return JudgeOutput(reward=float(correct), is_success=correct)
"""

TASKS = [
    Task(task_id="right", main_query="What is 2 + 2?", metadata={"answer": "4"}),
    Task(task_id="wrong", main_query="What is 3 + 3?", metadata={"answer": "6"}),
]
SAMPLING = SamplingParams(temperature=1.0, max_tokens=64)


class RecordingEngine(ScriptedEngine):
    """A scripted engine that keeps each call's sampling and knows whether it was closed."""

    def __init__(self, respond: Callable[[str], str], tokenizer_path: Path, model_path: str) -> None:
        super().__init__(ChatTokenizer(qwen25_tokenizer()), respond)
        self.tokenizer_path = str(tokenizer_path)
        self.model_path = model_path
        self.sampling: list[SamplingParams] = []
        self.closed = False

    async def generate(self, prompt_ids, sampling: SamplingParams) -> Generation:
        self.sampling.append(sampling)
        return await super().generate(prompt_ids, sampling)

    async def aclose(self) -> None:
        self.closed = True


def solver(prompt: str) -> str:
    return "4" if "2 + 2" in prompt else "5"


def critic_reply(lenient: bool) -> Callable[[str], str]:
    """The critic reviews anything as fine, and calls an answer correct when it is 4 to 2 + 2 (or always)."""

    def respond(prompt: str) -> str:
        if "Review:" in prompt:
            return "looks fine"
        if "Again:" in prompt:
            return "still fine"
        return "<Correct>" if lenient or "Is 4 the answer to What is 2 + 2?" in prompt else "<NotCorrect>"

    return respond


def model_folders(root: Path) -> SimpleNamespace:
    """Two tokenizer folders: the main model's and the critic's (same tokenizer, different paths)."""
    main, critic = root / "main_model", root / "critic_model"
    qwen25_tokenizer().save_pretrained(main)
    shutil.copytree(main, critic)
    return SimpleNamespace(main=main, critic=critic)


def engines_plugin(plugins: Plugins, folders: SimpleNamespace, lenient: bool = False) -> SimpleNamespace:
    """Engines `solver` and `critic` on `plugins`; what each built is kept in the returned lists."""
    built: SimpleNamespace = SimpleNamespace(solver=[], critic=[])

    def make(kind: str, respond: Callable[[str], str], folder: Path) -> Callable[[EngineModel], Any]:
        def factory(model: EngineModel) -> RecordingEngine:
            engine = RecordingEngine(respond, folder, model.path)
            getattr(built, kind).append(engine)
            return engine

        return factory

    def register_engines(register) -> None:
        register("solver", make("solver", solver, folders.main))
        register("critic", make("critic", critic_reply(lenient), folders.critic))

    plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="aux_test_engines")
    return built


def flow_config(
    write_config: Callable[..., Path],
    workdir: Path,
    folders: SimpleNamespace,
    module: str = FLOW,
    name: str = "aux_flow",
    **critic: Any,
) -> AstunerConfig:
    """The config of a run of `module` (default `FLOW`) with the critic; `critic` adds to its block.

    The module is written as `<name>.py`; imported modules stay cached, so
    each module text needs a name of its own.
    """
    (workdir / f"{name}.py").write_text(module, encoding="utf-8")
    path = write_config(
        {
            "model": {"path": str(folders.main)},
            "rollout": {"agentscope_workflow": f"{name}->workflow", "engine": "solver"},
            "task_judge": {"judge_protocol": f"{name}->judge"},
            "auxiliary_models": {
                "critic": {"path": str(folders.critic), "engine": "critic", "temperature": 0.0, **critic}
            },
        }
    )
    return load_config(path, environ={})


def run(config: AstunerConfig, plugins: Plugins, num_repeat: int = 2) -> list[Trajectory]:
    async def go() -> list[Trajectory]:
        async with rollout_stack(config, plugins) as runner:
            return await runner.run(TASKS, SAMPLING, num_repeat, progress=False)

    return asyncio.run(go())
