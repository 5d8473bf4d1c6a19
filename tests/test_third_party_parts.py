"""A third party's engine and judge, each its own installed package written against `astuner.api` only,
in a real `astuner run --backbone debug`: each is built from its own settings block (the engine from the
`EngineModel` it serves, never the run's config), and the run's records hold the engine's tokens and the
judge's rewards.

The two packages are built with pip into a folder of their own (`--target`), which the run finds on
PYTHONPATH: the shared environment is left as it was, so tests running beside this one never see them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from astuner.testing.cli import run_astuner
from astuner.testing.packages import plugin_package
from astuner.testing.records import rollout_rows
from astuner.testing.tokenizers import qwen25_tokenizer

pytestmark = pytest.mark.slow

ENGINE = '''
"""Engine `parrot`: says its settings' phrase to every prompt, in the served model's own tokens."""

from collections.abc import Sequence

from pydantic import BaseModel

from astuner.api import EngineModel, Generation, Register, SamplingParams, hookimpl, load_tokenizer


class ParrotSettings(BaseModel):
    phrase: str = "I do not know."


class ParrotEngine:
    def __init__(self, settings: ParrotSettings, model: EngineModel) -> None:
        tokenizer = load_tokenizer(model.path)
        self.tokenizer_path = model.path
        self.reply = [*tokenizer.encode(settings.phrase), tokenizer.end_of_turn_id]
        self.max_tokens = model.max_tokens

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        ids = self.reply[: min(sampling.max_tokens, self.max_tokens)]
        finish = "stop" if len(ids) == len(self.reply) else "length"
        return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=finish)


@hookimpl
def register_engines(register: Register) -> None:
    register("parrot", ParrotEngine, settings=ParrotSettings, summary="The same phrase to every prompt.")
'''

JUDGE = '''
"""Judge `keyword`: its settings' reward when the response holds its keyword, else 0."""

from pydantic import BaseModel

from astuner.api import JudgeOutput, Register, hookimpl


class KeywordSettings(BaseModel):
    keyword: str
    reward: float = 1.0


class KeywordJudge:
    def __init__(self, settings: KeywordSettings) -> None:
        self.settings = settings

    async def judge(self, task, output) -> JudgeOutput:
        hit = self.settings.keyword in (output.response_text or "")
        return JudgeOutput(reward=self.settings.reward if hit else 0.0, is_success=hit)


@hookimpl
def register_judges(register: Register) -> None:
    register("keyword", KeywordJudge, settings=KeywordSettings, summary="A keyword in the response.")
'''

WORKFLOW = """
from astuner import WorkflowOutput


async def workflow(task, model):
    reply = await model.chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=reply.content)
"""

PHRASE = "Forty-two apples, surely."


def _kernel_imports(source: str) -> set[str]:
    """The astuner modules a package's source imports."""
    tree = ast.parse(textwrap.dedent(source))
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("astuner")
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("astuner")
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both packages, built and installed into a folder of their own."""
    root = tmp_path_factory.mktemp("third_party")
    engine = plugin_package(root, "parrot-engine", "parrot_engine", ENGINE)
    judge = plugin_package(root, "keyword-judge", "keyword_judge", JUDGE)
    target = root / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--no-build-isolation",
            "--target", str(target), str(engine), str(judge),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return target


def test_both_packages_import_only_the_public_api() -> None:
    assert _kernel_imports(ENGINE) == {"astuner.api"}
    assert _kernel_imports(JUDGE) == {"astuner.api"}


def test_a_run_uses_a_third_party_engine_and_judge(site: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    qwen25_tokenizer().save_pretrained(model)
    (tmp_path / "plain_flow.py").write_text(WORKFLOW)
    (tmp_path / "conf.yaml").write_text(
        textwrap.dedent(
            f"""
            astuner:
              experiment_name: third_party
              model: {{path: {model}}}
              task_reader: {{type: arith}}
              task_judge:
                judge_protocol: keyword
                keyword: {{keyword: Forty-two, reward: 0.75}}
              rollout:
                agentscope_workflow: plain_flow->workflow
                engine: parrot
                engines: {{parrot: {{phrase: "{PHRASE}"}}}}
                max_response_length_in_one_turn: 64
              debug: {{debug_first_n_tasks: 2, num_repeat: 2}}
            """
        )
    )
    result = run_astuner(
        "run", "--conf", "conf.yaml", "--backbone", "debug", cwd=tmp_path, env={"PYTHONPATH": str(site)}
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (records,) = (tmp_path / "launcher_record" / "third_party").glob("*/rollouts/debug.jsonl")
    rows = rollout_rows(records)
    assert len(rows) == 4
    tokenizer = qwen25_tokenizer()
    phrase_ids = tokenizer.encode(PHRASE)
    for row in rows:
        assert row["error"] is None, row["error"]
        ((call,),) = [row["calls"]]
        assert call["response_ids"][: len(phrase_ids)] == phrase_ids
        assert call["response_logprobs"] == [-0.5] * len(call["response_ids"])
        assert call["content"] == PHRASE
        assert row["reward"] == 0.75 and row["is_success"] is True
