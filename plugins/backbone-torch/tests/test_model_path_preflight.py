"""A model.path that names no model on this machine is refused before any run folder exists.

Hugging Face took a missing local folder for a hub id ("Repo id must be in the
form 'repo_name' or 'namespace/repo_name'"), after the run's folder was made.
Each case runs the real command line.
"""

from pathlib import Path

import pytest
import yaml

from astuner.testing.cli import run_astuner

WORKFLOW = """
from astuner import WorkflowOutput


async def answer(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content)
"""

MISSING = ["./models/nope", "../elsewhere/model", "{workdir}/models/gone/qwen", "weights/qwen.gguf"]


def _conf(workdir: Path) -> Path:
    (workdir / "answer_workflow.py").write_text(WORKFLOW)
    path = workdir / "conf.yaml"
    block = {"task_reader": {"type": "arith"}, "rollout": {"agentscope_workflow": "answer_workflow->answer"}}
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


def _refused(workdir: Path, *args: str) -> str:
    result = run_astuner(*args, cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("error:") == 1 and "model.path" in result.stderr, result.stderr
    assert "Repo id" not in result.stderr and "failed" not in result.stdout
    assert not (workdir / "launcher_record").exists()
    return result.stderr


@pytest.mark.parametrize("backbone", ["torch", "debug"])
@pytest.mark.parametrize("path", MISSING)
def test_a_missing_local_model_is_named_with_where_it_was_looked_for(
    workdir: Path, backbone: str, path: str
) -> None:
    path = path.format(workdir=workdir)
    conf = str(_conf(workdir))
    error = _refused(workdir, "run", "--conf", conf, "--backbone", backbone, "-o", f"model.path={path}")
    assert f"'{path}'" in error and str((workdir / path).resolve()) in error.replace("\n", "")


def test_an_empty_model_path_is_refused_before_the_folder(workdir: Path) -> None:
    conf = str(_conf(workdir))
    error = _refused(workdir, "run", "--conf", conf, "--backbone", "torch", "-o", "model.path=")
    assert "model.path is empty" in error
