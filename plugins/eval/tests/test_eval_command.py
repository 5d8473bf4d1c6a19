"""`astuner eval`: greedy and pass@k scores of a model or a checkpoint, written like a run."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import astuner_eval.plugin
import pytest
import yaml
from astuner_eval.checkpoints import latest_checkpoint, model_for_checkpoint
from astuner_eval.evaluation import EvalOptions, eval_metrics, run_eval
from typer.testing import CliRunner

from astuner.api import AstunerError, ChatTokenizer, ConfigError, Runs, Trajectory, free_port, hookimpl
from astuner.cli import make_app
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings
from astuner.record import read_metrics
from astuner.run_status import read_status
from astuner.testing.cli import run_astuner
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer
from astuner.training import Plugins, build, checkpoint_of, load_config, pass_at_k, read_trajectories

# One model call per task; the judge's verdict depends only on what was sampled,
# so with sampling some runs of a task succeed and some fail.
WORKFLOW = """
from astuner import JudgeOutput, WorkflowOutput


async def one_call(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content)


async def even_length(task, response):
    even = len(response or "") % 2 == 0
    return JudgeOutput(reward=1.0 if even else 0.0, is_success=even)


async def exact(task, response):
    right = (response or "").strip() == task["answer"]
    return JudgeOutput(reward=1.0 if right else 0.0, is_success=right)


async def huge(task, response):
    return JudgeOutput(reward=1.7e308, is_success=True)  # finite, but a mean of two overflows


async def counted(task, response):
    right = (response or "").strip() == task["answer"]
    metrics = {"correct": float(right), "judge/chars": float(len(response or ""))}
    if not right:
        metrics["wrong_zero"] = response == "0"  # reported by the wrong runs only
    return JudgeOutput(reward=1.0 if right else 0.0, is_success=right, metrics=metrics)
"""


def write_project(folder: Path, model_path: str, judge: str = "even_length", **extra: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval_flows.py").write_text(WORKFLOW)
    block: dict = {
        "experiment_name": "evalproj",
        "model": {"path": model_path},
        "task_reader": {"type": "arith", "arith": {"train_size": 4, "validation_size": 6}},
        "task_judge": {"judge_protocol": f"eval_flows->{judge}"},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "eval_flows->one_call",
            "num_repeat": 2,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 8,
            "compute_madness_checklist": [],
        },
        "trainer_common": {"total_training_steps": 1, "save_freq": 1, "test_freq": 5, "seed": 3},
    }
    for key, value in extra.items():
        block[key] = {**block.get(key, {}), **value}
    conf = folder / "evalproj.yaml"
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return conf


def eval_run(root: Path) -> Path:
    (run,) = (root / "launcher_record" / "evalproj_eval").iterdir()
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """One torch training step on the tiny model; the project folder (with the run under launcher_record)."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("trained")
    conf = write_project(folder, str(tiny_model_dir), torch={"train_dtype": "float32", "num_threads": 1})
    result = run_astuner("run", "--conf", conf.name, "--backbone", "torch", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder


def by_id(trajectory: Trajectory) -> str:
    return trajectory.trajectory_id


def step_1_of(folder: Path) -> Path:
    (checkpoint,) = (folder / "launcher_record" / "evalproj").glob("*/checkpoints/step_1")
    return checkpoint


# ----------------------------------------------------------------- in-process


@pytest.fixture
def scripted(plugins: Plugins, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A scripted engine: every task's second call gives the right answer, other calls a wrong one."""
    tokenizer_dir = tmp_path_factory.mktemp("tok")
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    tasks = list(ArithReader(ArithReaderSettings(train_size=4, validation_size=6)).read("validation"))
    seen: Counter[str] = Counter()
    temperatures: list[float] = []

    def respond(prompt: str) -> str:
        seen[prompt] += 1
        answer = next(t.answer for t in tasks if t.main_query in prompt)
        return answer if seen[prompt] == 2 else "0"

    class Recording(ScriptedEngine):
        async def generate(self, prompt_ids, sampling):
            temperatures.append(sampling.temperature)
            return await super().generate(prompt_ids, sampling)

    def make_engine(config):
        engine = Recording(ChatTokenizer(qwen25_tokenizer()), respond)
        engine.tokenizer_path = str(tokenizer_dir)
        return engine

    plugins.add(
        SimpleNamespace(register_engines=hookimpl(lambda register: register("scripted", make_engine))),
        name="scripted_engine",
    )
    return SimpleNamespace(plugins=plugins, temperatures=temperatures, tokenizer_dir=tokenizer_dir)


def test_k_samples_give_the_unbiased_pass_at_k(scripted: SimpleNamespace, workdir: Path) -> None:
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="exact", rollout={"engine": "scripted"})
    report = run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions(n_samples=3, max_tasks=4))
    # Each task: 3 runs, exactly one right. pass@3 = 1, success rate = pass@1 = 1/3.
    assert report.metrics["eval/pass@3"] == 1.0
    assert report.metrics["eval/success_rate"] == pytest.approx(1 / 3)
    assert pass_at_k(report.trajectories, 2) == pytest.approx(2 / 3)
    assert scripted.temperatures == [1.0] * 12  # the config's temperature when sampling
    run = report.experiment.path
    assert run.parent.name == "evalproj_eval"
    recorded = read_trajectories(run / "rollouts" / "eval.jsonl")  # in the order the runs ended
    assert sorted(recorded, key=by_id) == sorted(report.trajectories, key=by_id)
    summary = json.loads((run / "eval_summary.json").read_text())
    assert summary["metrics"] == report.metrics and summary["tasks"] == 4 and summary["n_samples"] == 3
    assert json.loads((run / "metrics.jsonl").read_text())["eval/pass@3"] == 1.0


def test_judge_metrics_are_averaged_into_the_summary_the_row_and_the_table(
    scripted: SimpleNamespace, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_project(
        workdir, str(scripted.tokenizer_dir), judge="counted", rollout={"engine": "scripted"}
    )
    report = run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions(n_samples=3, max_tasks=4))
    # Each task: 3 runs, the second one right; the wrong ones answer "0".
    answers = [t.metadata["task"]["metadata"]["answer"] for t in report.trajectories if t.is_success]
    chars = (sum(map(len, answers)) + 8 * len("0")) / 12
    expected = {"correct": pytest.approx(1 / 3), "chars": pytest.approx(chars), "wrong_zero": 1.0}
    run = report.experiment.path
    summary = json.loads((run / "eval_summary.json").read_text())
    assert summary["judge_metrics"] == expected
    assert summary["metrics"]["eval/judge/correct"] == pytest.approx(1 / 3)
    (row,) = read_metrics(run / "metrics.jsonl")
    assert {k: v for k, v in row.items() if k.startswith("eval/judge/")} == {
        f"eval/judge/{name}": value for name, value in expected.items()
    }
    assert row["eval/tool_calls_per_reply"] == row["eval/episodes_with_tool_call"] == 0.0
    assert "eval/tool_call_rate" not in row
    astuner_eval.plugin.print_report(report)
    shown = capsys.readouterr().out
    assert re.search(r"judge: correct +│ 0\.3333", shown), shown
    assert "judge: wrong_zero" in shown and "judge: chars" in shown
    assert "tool calls per reply" not in shown  # the workflow offered no tools


def test_one_sample_is_greedy_and_the_folder_has_what_the_log_viewer_lists(
    scripted: SimpleNamespace, workdir: Path
) -> None:
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="exact", rollout={"engine": "scripted"})
    report = run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions())
    assert scripted.temperatures == [0.0] * 6  # every validation task once, greedy
    assert report.metrics["eval/pass@1"] == report.metrics["eval/success_rate"] == 0.0
    (run,) = (workdir / "launcher_record" / "evalproj_eval").iterdir()
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))["astuner"]
    assert (saved["experiment_name"], saved["backbone"]) == ("evalproj_eval", load_config(conf).backbone)
    assert read_metrics(run / "metrics.jsonl")[-1]["eval/reward_mean"] == 0.0
    assert [f.name for f in (run / "rollouts").iterdir()] == ["eval.jsonl"]
    assert (read_status(run).state, read_status(run).command) == ("finished", "eval")


def test_an_evaluation_is_a_run_of_the_command_eval_not_a_backbone(
    scripted: SimpleNamespace, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = []

    class Told:
        def notify(self, summary) -> None:
            told.append(summary)

    notifiers = SimpleNamespace(register_notifiers=hookimpl(lambda register: register("told", Told)))
    scripted.plugins.add(notifiers, name="told")
    extra = {"rollout": {"engine": "scripted"}, "notify": {"told": {}}}
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="exact", **extra)
    config = load_config(conf, ["backbone=torch"])
    report = run_eval(config, Runs(scripted.plugins), EvalOptions(max_tasks=2))
    run = report.experiment.path
    (summary,) = told
    assert (summary.command, summary.backbone, summary.name, summary.status) == (
        "eval", "torch", "evalproj_eval", "finished"
    )  # fmt: skip
    assert yaml.safe_load((run / "config.yaml").read_text())["astuner"]["backbone"] == "torch"
    assert str(read_status(run)) == "finished" and read_status(run).command == "eval"
    closing = capsys.readouterr().out.strip().splitlines()
    assert closing[-3].startswith("eval finished after ") and closing[-3].endswith(f": {run.resolve()}")
    assert closing[-2:] == [
        f"  records:     {run.resolve()}/rollouts/",
        f"  look:        astuner logview {run.resolve()}  (needs astuner-logview)",
    ]
    logged = (run / "astuner.log").read_text()
    assert '"event": "eval started"' in logged and '"event": "eval finished"' in logged


def test_a_reward_near_the_float_limit_leaves_strict_json_and_one_warning_per_metric(
    scripted: SimpleNamespace, workdir: Path
) -> None:
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="huge", rollout={"engine": "scripted"})
    report = run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions(max_tasks=3))
    assert math.isinf(report.metrics["eval/reward_mean"]) and math.isinf(report.metrics["eval/reward_std"])
    run = report.experiment.path

    def strict(text: str) -> dict:
        def refuse(literal: str) -> None:
            raise AssertionError(f"{literal} is not JSON")

        return json.loads(text, parse_constant=refuse)

    (row,) = [strict(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (row["eval/reward_mean"], row["eval/reward_std"], row["eval/success_rate"]) == (None, None, 1.0)
    summary = strict((run / "eval_summary.json").read_text())
    assert (summary["metrics"]["eval/reward_mean"], summary["metrics"]["eval/reward_std"]) == (None, None)
    logged = [strict(line) for line in (run / "astuner.log").read_text().splitlines()]  # the log too
    (scored,) = [entry for entry in logged if entry["event"] == "eval scored"]
    assert (scored["eval/reward_mean"], scored["eval/success_rate"]) == (None, 1.0)
    warned = [entry["event"] for entry in logged if entry["level"] == "warning"]
    assert [w.split(" is ")[0] for w in warned] == [
        "'eval/reward_mean'",
        "'eval/reward_std'",
        "'metrics.eval/reward_mean'",
        "'metrics.eval/reward_std'",
    ], warned
    assert f"{run / 'metrics.jsonl'} keeps null for it" in warned[0]
    assert warned[1].startswith("'eval/reward_std' is inf, not a finite number")


def test_bad_options_fail_before_a_folder_is_made(scripted: SimpleNamespace, workdir: Path) -> None:
    conf = write_project(workdir, str(scripted.tokenizer_dir), rollout={"engine": "scripted"})
    with pytest.raises(AstunerError, match="--split must be 'train' or 'validation'"):
        run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions(split="test"))
    served = load_config(conf, ["rollout.engine_url=http://127.0.0.1:9", "rollout.engine=auto"])
    with pytest.raises(AstunerError, match=r"rollout\.engine_url .*serves its own model"):
        run_eval(served, Runs(scripted.plugins), EvalOptions(checkpoint=workdir))
    assert not (workdir / "launcher_record").exists()


def test_a_lora_adapter_is_merged_into_its_base(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merged folder computes what base + adapter compute, and is built once."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("ASTUNER_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # B starts at zero; make the adapter change the model
    adapter = tmp_path / "step_3"
    lora.save_pretrained(adapter)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        expected = lora(ids).logits
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
    merged = Path(model_for_checkpoint(adapter))
    assert merged.parent == tmp_path / "cache" / "merged"
    assert not (merged / "adapter_config.json").exists() and (merged / "tokenizer_config.json").exists()
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(merged)(ids).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert not torch.allclose(got, plain, atol=1e-3)
    assert model_for_checkpoint(adapter) == str(merged)


class StepsBackbone:
    """A backbone whose checkpoints are the `ckpt_<n>` folders of its runs; it notes what it is asked."""

    asked: ClassVar[list[list[str]]] = []

    def run(self, ctx: object) -> None:
        raise NotImplementedError

    def latest_checkpoint(self, runs: Iterable[Path]) -> Path | None:
        runs = list(runs)
        StepsBackbone.asked.append([run.name for run in runs])
        found = [(int(p.name[5:]), p) for run in runs for p in run.glob("ckpt_*")]
        return max(found)[1] if found else None


class StepsPlugin:
    @staticmethod
    @hookimpl
    def register_backbones(register) -> None:
        register("steps", StepsBackbone)


def test_latest_asks_the_backbone_that_wrote_each_run(tmp_path: Path, plugins: Plugins) -> None:
    def run(name: str, backbone: str, *steps: int) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.yaml").write_text(yaml.safe_dump({"astuner": {"backbone": backbone}}))
        for step in steps:
            (folder / f"ckpt_{step}").mkdir()
        return folder

    first = run("20260101-000000", "steps", 10, 9)
    run("20260102-000000", "steps", 2)
    run("20260103-000000", "debug")  # a backbone that keeps no checkpoints
    run("20260104-000000", "gone", 50)  # a backbone no longer installed
    plugins.add(StepsPlugin, name="steps")
    StepsBackbone.asked.clear()
    config = load_config(None, environ={})
    installed = plugins.registry("backbone")
    found = latest_checkpoint(tmp_path, installed, lambda name: build(config, plugins, "backbone", name))
    assert found == first / "ckpt_10"
    assert StepsBackbone.asked == [["20260101-000000", "20260102-000000"]]
    second = tmp_path / "20260102-000000"
    assert checkpoint_of(StepsBackbone(), [second]) == second / "ckpt_2"
    assert checkpoint_of(object(), [first]) is None


def test_latest_without_checkpoints_says_to_train_first(tmp_path: Path, plugins: Plugins) -> None:
    with pytest.raises(AstunerError, match=r"no checkpoint under .* yet\. Train first"):
        latest_checkpoint(tmp_path / "demo", plugins.registry("backbone"), lambda name: StepsBackbone())


# ----------------------------------------------------------------- command line


def test_the_command_registers_with_its_options(plugins: Plugins) -> None:
    plugins.add(astuner_eval.plugin, name="eval")
    app = make_app(plugins)
    shown = CliRunner().invoke(app, ["eval", "--help"])
    assert shown.exit_code == 0, shown.output
    for option in ("--conf", "--checkpoint", "--split", "--n-samples", "--temperature", "--max-tasks"):
        assert option in shown.output, option
    assert "<bool>" not in shown.output  # plain click help, like the kernel's commands
    assert "eval" in CliRunner().invoke(app, ["--help"]).output
    (info,) = [i for i in plugins.infos() if i.name == "eval"]
    assert info.hooks == ["register_commands"] and info.status == "ok"


@pytest.mark.slow
def test_eval_of_a_trained_checkpoint_greedy_and_pass_at_k(trained: Path) -> None:
    checkpoint = step_1_of(trained)
    greedy = run_astuner("eval", "--conf", "evalproj.yaml", "--checkpoint", str(checkpoint), cwd=trained)
    assert greedy.returncode == 0, greedy.stderr
    # the project's training keys (trainer_common, torch) are no news to an evaluation
    assert "Not used on backbone" not in greedy.stderr
    for label in ("mean reward", "success rate", "pass@1", "eval.jsonl", "eval_summary.json"):
        assert label in greedy.stdout, label
    run = eval_run(trained)
    summary = json.loads((run / "eval_summary.json").read_text())
    assert summary["model"] == summary["checkpoint"] == str(checkpoint.resolve())
    assert (summary["step"], summary["temperature"], summary["tasks"]) == (1, 0.0, 6)
    trajectories = read_trajectories(run / "rollouts" / "eval.jsonl")
    assert len(trajectories) == 6 and all(t.error is None and t.calls for t in trajectories)
    assert summary["metrics"] == pytest.approx(eval_metrics(trajectories, 1))
    assert yaml.safe_load((run / "config.yaml").read_text())["astuner"]["model"]["path"] == str(
        checkpoint.resolve()
    )

    sampled = run_astuner(
        "eval", "--conf", "evalproj.yaml", "--checkpoint", "latest", "-k", "4", "--max-tasks", "3",
        cwd=trained,
    )  # fmt: skip
    assert sampled.returncode == 0, sampled.stderr
    assert "pass@4" in sampled.stdout
    (run,) = [r for r in (trained / "launcher_record" / "evalproj_eval").iterdir() if r != run]
    summary = json.loads((run / "eval_summary.json").read_text())
    assert summary["checkpoint"] == str(checkpoint.resolve())  # 'latest': the run's only checkpoint
    trajectories = read_trajectories(run / "rollouts" / "eval.jsonl")
    assert Counter(t.group_id for t in trajectories) == {"eval-0": 4, "eval-1": 4, "eval-2": 4}
    assert summary["temperature"] == 1.0
    assert summary["metrics"]["eval/pass@4"] == pytest.approx(pass_at_k(trajectories, 4))
    # Sampling at temperature 1 from a random model: the four runs of a task differ.
    first_task = [t for t in trajectories if t.group_id == "eval-0"]
    assert len({tuple(t.calls[0].response_ids) for t in first_task}) > 1


@pytest.mark.slow
def test_eval_of_a_lora_checkpoint(tmp_path: Path, tiny_model_dir: Path) -> None:
    conf = write_project(
        tmp_path,
        str(tiny_model_dir),
        model={"lora": {"rank": 4}},
        torch={"train_dtype": "float32", "num_threads": 1},
    )
    cache = {"ASTUNER_CACHE": str(tmp_path / "cache")}
    assert run_astuner("run", "--conf", conf.name, "--backbone", "torch", cwd=tmp_path).returncode == 0
    checkpoint = step_1_of(tmp_path)
    assert (checkpoint / "adapter_config.json").is_file()
    result = run_astuner(
        "eval",
        "--conf",
        conf.name,
        "--checkpoint",
        str(checkpoint),
        "--max-tasks",
        "2",
        cwd=tmp_path,
        env=cache,
    )
    assert result.returncode == 0, result.stderr
    assert "LoRA adapter, merged" in result.stdout
    summary = json.loads((eval_run(tmp_path) / "eval_summary.json").read_text())
    assert Path(summary["model"]).parent == tmp_path / "cache" / "merged"
    assert len(read_trajectories(eval_run(tmp_path) / "rollouts" / "eval.jsonl")) == 2


@pytest.mark.slow
def test_a_missing_checkpoint_is_a_clear_error(trained: Path) -> None:
    evals = trained / "launcher_record" / "evalproj_eval"
    before = sorted(evals.iterdir()) if evals.exists() else []
    missing = trained / "launcher_record" / "evalproj" / "nope" / "checkpoints" / "step_9"
    result = run_astuner("eval", "--conf", "evalproj.yaml", "--checkpoint", str(missing), cwd=trained)
    assert result.returncode == 1
    assert f"'{missing}' does not exist" in result.stderr
    assert "checkpoints/step_<n>" in result.stderr and "Traceback" not in result.stderr
    run_folder = step_1_of(trained).parent.parent
    result = run_astuner("eval", "--conf", "evalproj.yaml", "--checkpoint", str(run_folder), cwd=trained)
    assert result.returncode == 1
    assert "holds no model" in result.stderr and str(step_1_of(trained)) in result.stderr
    assert (sorted(evals.iterdir()) if evals.exists() else []) == before  # no folder for a failed eval


@pytest.mark.slow
def test_eval_on_an_environment_serves_it_with_with_env(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The env template's eval command: the service runs for the evaluation and the env judge scores."""
    assert run_astuner("init", "game", "--template", "env", cwd=tmp_path).returncode == 0
    result = run_astuner(
        "eval", "--conf", "game/game.yaml", "--with-env", "guess_number", "--max-tasks", "2",
        "-o", f"model.path={tiny_model_dir}",
        "-o", f"task_reader.env_service.env_url=http://127.0.0.1:{free_port()}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "launcher_record" / "game_eval").iterdir()
    trajectories = read_trajectories(run / "rollouts" / "eval.jsonl")
    assert sorted(t.task_id for t in trajectories) == ["dev-0000", "dev-0001"]
    for t in trajectories:
        assert t.error is None, t.error
        assert t.metadata["env_steps"] and "env_score" in t.metrics


def test_eval_shows_its_progress(scripted: SimpleNamespace, workdir: Path, capsys) -> None:
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="exact", rollout={"engine": "scripted"})
    run_eval(load_config(conf), Runs(scripted.plugins), EvalOptions(n_samples=2, max_tasks=3))
    shown = capsys.readouterr().out
    assert re.search(r"eval .*6/6 .*reward [\d.]+ +\d+ tok/s", shown), shown


def test_an_evaluation_checks_only_the_split_it_reads(scripted: SimpleNamespace, workdir: Path) -> None:
    """A validation file that is not there yet stops no evaluation of the train split, only of its own."""
    conf = write_project(workdir, str(scripted.tokenizer_dir), judge="exact", rollout={"engine": "scripted"})
    (workdir / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    jsonl = [
        "task_reader.type=jsonl",
        "task_reader.jsonl.training_file=train.jsonl",
        "task_reader.jsonl.validation_file=later.jsonl",
    ]
    report = run_eval(load_config(conf, jsonl), Runs(scripted.plugins), EvalOptions(split="train"))
    assert report.summary["tasks"] == 1
    with pytest.raises(ConfigError, match=re.escape("task_reader.jsonl.validation_file")):
        run_eval(load_config(conf, jsonl), Runs(scripted.plugins), EvalOptions())
