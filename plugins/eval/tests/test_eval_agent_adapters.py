"""`astuner eval` of per-agent adapters: a checkpoint's `adapters/<agent>/`, or `agents.<name>.lora.path`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import astuner_eval.plugin
import pytest
from astuner_eval.checkpoints import agent_adapters, model_for_checkpoint
from astuner_eval.evaluation import EvalOptions, run_eval, use_checkpoint
from test_eval_command import eval_run, write_project

from astuner.api import AstunerError, ChatTokenizer, EngineModel, Runs, hookimpl
from astuner.record import read_trajectories
from astuner.testing.cli import run_astuner
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer
from astuner.training import Plugins, load_config

# A wolf, a seer and a villager answer each task in turn; the wolf's answer is the response.
AGENTS_FLOW = """
from astuner import JudgeOutput, WorkflowOutput


async def village(task, model):
    replies = []
    for agent in ("wolf", "seer", "villager"):
        call = await model.for_agent(agent).chat([{"role": "user", "content": task["question"]}])
        replies.append(call.content)
    return WorkflowOutput(response=replies[0])


async def anything(task, response):
    return JudgeOutput(reward=1.0, is_success=True)
"""


def per_agent_checkpoint(folder: Path, *agents: str) -> Path:
    """A `step_<n>` folder as a torch run with per-agent adapters writes it (adapter files only)."""
    for agent in agents:
        (folder / "adapters" / agent).mkdir(parents=True)
        (folder / "adapters" / agent / "adapter_config.json").write_text("{}")
    return folder


def test_a_per_agent_checkpoint_lists_each_agents_adapter(tmp_path: Path) -> None:
    checkpoint = per_agent_checkpoint(tmp_path / "step_4", "wolf", "seer")
    (checkpoint / "adapters" / "stray").mkdir()  # no adapter in it
    assert agent_adapters(checkpoint) == {
        "seer": str((checkpoint / "adapters" / "seer").resolve()),
        "wolf": str((checkpoint / "adapters" / "wolf").resolve()),
    }
    assert agent_adapters(tmp_path) == {}
    with pytest.raises(AstunerError, match=r"holds no model: .*adapters/<agent>/adapter_config\.json"):
        model_for_checkpoint(tmp_path)


def test_a_checkpoints_adapters_become_the_agents_paths_on_the_configs_model(tmp_path: Path) -> None:
    checkpoint = per_agent_checkpoint(tmp_path / "step_4", "wolf", "seer")
    config = load_config(
        None,
        ["model.path=base", "agents.wolf.lora.rank=4", "agents.wolf.lora.path=old", "agents.judge.lora=null"],
        environ={},
    )
    use_checkpoint(config, checkpoint, "transformers")
    assert config.model.path == "base"
    assert config.agents["wolf"].lora.path == str((checkpoint / "adapters" / "wolf").resolve())
    assert config.agents["wolf"].lora.rank == 4  # the entry's other settings stay
    assert config.agents["seer"].lora.path == str((checkpoint / "adapters" / "seer").resolve())
    assert config.agents["judge"].lora is None  # not in the checkpoint

    config = load_config(None, ["model.path=base"], environ={})
    with pytest.raises(
        AstunerError, match=r"\(agents\.seer\.lora\.path, agents\.wolf\.lora\.path\).*engine vllm"
    ):
        use_checkpoint(config, checkpoint, "vllm")


@pytest.fixture
def adapted(plugins: Plugins, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Engine `transformers` scripted: it serves the adapters it is handed (`EngineModel.adapters`)
    except the seer's, and notes each model it serves."""
    tokenizer_dir = tmp_path_factory.mktemp("tok")
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    served: list[EngineModel] = []

    def make_engine(model: EngineModel) -> ScriptedEngine:
        served.append(model)
        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "7")
        engine.tokenizer_path = str(tokenizer_dir)
        engine.adapter_names = frozenset(model.adapters) - {"seer"}
        return engine

    plugins.add(
        SimpleNamespace(register_engines=hookimpl(lambda register: register("transformers", make_engine))),
        name="adapted_engine",
    )
    return SimpleNamespace(plugins=plugins, served=served, tokenizer_dir=tokenizer_dir)


def village_project(folder: Path, model_path: str, **extra: dict) -> Path:
    conf = write_project(folder, model_path, judge="anything", rollout={"engine": "transformers"}, **extra)
    (folder / "village_flows.py").write_text(AGENTS_FLOW)
    text = conf.read_text().replace("eval_flows->one_call", "village_flows->village")
    conf.write_text(text.replace("eval_flows->anything", "village_flows->anything"))
    return conf


def test_eval_of_a_per_agent_checkpoint_routes_each_agent_and_records_its_adapter(
    adapted: SimpleNamespace, workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    conf = village_project(workdir, str(adapted.tokenizer_dir), agents={"villager": {"lora": {"rank": 4}}})
    checkpoint = per_agent_checkpoint(workdir / "step_3", "wolf", "seer")
    report = run_eval(
        load_config(conf), Runs(adapted.plugins), EvalOptions(max_tasks=2, checkpoint=checkpoint)
    )

    (model,) = adapted.served
    wolf, seer = (str((checkpoint / "adapters" / agent).resolve()) for agent in ("wolf", "seer"))
    assert model.path == str(adapted.tokenizer_dir) and model.adapters == {"wolf": wolf, "seer": seer}
    summary = json.loads((eval_run(workdir) / "eval_summary.json").read_text())
    # The engine did not load the seer's adapter: its calls ran on the base model, and the runner said so.
    assert summary["adapters"] == {"wolf": wolf} and summary["step"] == 3
    assert summary["model"] == str(adapted.tokenizer_dir)
    assert "['agents.seer.lora.path']" in capfd.readouterr().err
    calls = [c for t in read_trajectories(eval_run(workdir) / "rollouts" / "eval.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter) for c in calls} == {
        ("wolf", "wolf"),
        ("seer", None),
        ("villager", None),  # a new adapter (no path) is the base model: nothing to load
    }
    astuner_eval.plugin.print_report(report)
    assert f"agent wolf: adapter {wolf} on {adapted.tokenizer_dir}" in capfd.readouterr().out


@pytest.mark.slow
def test_eval_of_a_trained_per_agent_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """One torch step trains the wolf's and the seer's adapters; `--checkpoint latest` evaluates both,
    and `-o agents.wolf.lora.path=` evaluates one role's adapter against the base model."""
    agents = {"wolf": {"lora": {"rank": 4}}, "seer": {"lora": {"rank": 4}}}
    torch = {"train_dtype": "float32", "num_threads": 1}
    conf = village_project(tmp_path, str(tiny_model_dir), agents=agents, torch=torch)
    trained = run_astuner("run", "--conf", conf.name, "--backbone", "torch", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    (checkpoint,) = (tmp_path / "launcher_record" / "evalproj").glob("*/checkpoints/step_1")
    assert not (checkpoint / "config.json").exists()

    result = run_astuner(
        "eval", "--conf", conf.name, "--checkpoint", "latest", "--max-tasks", "2", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "agents without their adapters" not in result.stderr
    (run,) = (tmp_path / "launcher_record" / "evalproj_eval").iterdir()
    summary = json.loads((run / "eval_summary.json").read_text())
    adapters = {agent: str((checkpoint / "adapters" / agent).resolve()) for agent in ("seer", "wolf")}
    assert summary["adapters"] == adapters and summary["model"] == str(tiny_model_dir)
    calls = [c for t in read_trajectories(run / "rollouts" / "eval.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter) for c in calls} == {
        ("wolf", "wolf"),
        ("seer", "seer"),
        ("villager", None),
    }

    one_role = ["-o", f"agents.wolf.lora.path={adapters['wolf']}", "--max-tasks", "2"]
    result = run_astuner("eval", "--conf", conf.name, *one_role, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agents without their adapters" not in result.stderr  # the seer's new adapter: the base model
    (run,) = [r for r in (tmp_path / "launcher_record" / "evalproj_eval").iterdir() if r != run]
    assert json.loads((run / "eval_summary.json").read_text())["adapters"] == {"wolf": adapters["wolf"]}
    calls = [c for t in read_trajectories(run / "rollouts" / "eval.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter) for c in calls} == {
        ("wolf", "wolf"),
        ("seer", None),
        ("villager", None),
    }
