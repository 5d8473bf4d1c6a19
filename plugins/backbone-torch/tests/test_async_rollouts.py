"""Asynchronous rollouts (`trainer_common.max_staleness`): the config's refusal, the per-call staleness the
update weighs and reports, the rollout copy, the engine's queue, and tiny runs that generate during the
update, stay within their bound and resume at the right tasks (also killed mid-save, with a batch in
flight); with 0, the synchronous loop, reproducibly."""

import asyncio
import json
import math
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
from astuner_backbone_torch.backbone import (  # noqa: E402
    TorchBackbone,
    asynchronous_engine,
    call_staleness,
    sample_staleness,
    staleness_metrics,
)
from astuner_backbone_torch.batching import make_micro_batches  # noqa: E402
from astuner_backbone_torch.checkpoint import latest_checkpoint, read_checkpoint  # noqa: E402
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings  # noqa: E402
from astuner_backbone_torch.losses import step_norm  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer  # noqa: E402
from test_backbone_run import HERE, astuner_run, run_folders, weights, write_conf  # noqa: E402
from test_trainer import fixed_batch, make_trainer, with_old_logprobs  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.config import load_config  # noqa: E402
from astuner.core.merge import merge_calls  # noqa: E402
from astuner.core.trajectory import LLMCall, Sample, Trajectory  # noqa: E402
from astuner.errors import AstunerError, ConfigError  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402
from astuner.rollout.engine import SamplingParams  # noqa: E402
from astuner.training import agent_plan  # noqa: E402

CORRECTED = "trainer_common.algorithm.rollout_correction.rollout_is=token"


def test_staleness_without_importance_sampling_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["trainer_common.max_staleness=1"], environ={})
    message = str(caught.value)
    assert "trainer_common.max_staleness" in message
    assert "trainer_common.algorithm.rollout_correction.rollout_is" in message
    assert load_config(None, ["trainer_common.max_staleness=2", CORRECTED], environ={})
    assert load_config(None, [], environ={}).trainer_common.max_staleness == 0


def test_a_request_arriving_while_weights_wait_runs_on_the_new_ones(tiny_model_dir: Path) -> None:
    """A running batch admits no request once a weight swap waits for it: it ends, the swap goes in,
    and the late request is sampled by the new version (it would otherwise join and hold the swap off)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = TransformersEngine(model, TransformersEngineSettings(batch_wait_ms=0, continuous_batching=True))
    engine.eos_ids = ()  # the long reply runs its whole budget

    def swap() -> None:
        with engine.changing_weights():
            engine.policy_version = 1

    async def scenario():
        long = asyncio.ensure_future(
            engine.generate([5, 17, 42], SamplingParams(temperature=0.0, max_tokens=1500))
        )
        # the batch holds the weights (it counts itself in a moment before it takes them)
        while not engine.weights_lock.locked():
            await asyncio.sleep(0.001)
        swapping = threading.Thread(target=swap)
        swapping.start()
        while not engine.weight_change_waiting:
            assert not long.done(), "the long reply ended before the swap asked for the weights"
            await asyncio.sleep(0.001)
        late = await engine.generate([9, 9, 9], SamplingParams(temperature=0.0, max_tokens=3))
        swapping.join()
        return await long, late

    long, late = asyncio.run(scenario())
    assert (long.policy_version, late.policy_version) == (0, 1)
    assert long.finish_reason == "length" and engine.batches_run == 2


def test_requests_cancelled_while_queued_are_never_decoded(tiny_model_dir: Path) -> None:
    """A stopped run's queued requests are dropped, not decoded before the ones still wanted (or the exit)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = TransformersEngine(model, TransformersEngineSettings(batch_wait_ms=0, continuous_batching=False))
    engine.eos_ids = ()  # the long reply runs its whole budget

    async def scenario():
        long = asyncio.ensure_future(engine.generate([5, 17, 42], SamplingParams(max_tokens=40, seed=1)))
        while engine.batches_run == 0:
            await asyncio.sleep(0.001)
        gone = asyncio.ensure_future(engine.generate([9, 9, 9], SamplingParams(max_tokens=40, seed=2)))
        await asyncio.sleep(0)  # queued
        gone.cancel()
        wanted = await engine.generate([7, 7, 7], SamplingParams(max_tokens=3, seed=3))
        await long
        return wanted

    wanted = asyncio.run(scenario())
    assert len(wanted.token_ids) <= 3
    assert engine.batches_run == 2  # the long one's and the wanted one's: the cancelled one never ran


def test_asynchronous_rollouts_refuse_an_engine_that_cannot_swap_between_batches(
    tiny_model_dir: Path,
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = TransformersEngine(model)
    assert asynchronous_engine(engine, 0) is None  # the synchronous loop
    assert asynchronous_engine(engine, 2) is engine
    with pytest.raises(AstunerError, match=r"trainer_common\.max_staleness is 1"):
        asynchronous_engine(object(), 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrides",
    [("model.lora.rank=4",), ("agents.A.lora.rank=4", "agents.B.lora.rank=4")],
    ids=["lora", "agents"],
)
def test_a_float32_rollout_copy_shares_the_frozen_base_and_owns_its_adapters(
    tiny_model_dir: Path, overrides: tuple[str, ...]
) -> None:
    pytest.importorskip("peft")
    config = load_config(None, [f"model.path={tiny_model_dir}", *overrides], environ={})
    plan = agent_plan(
        config.agents,
        trainable_targets=config.rollout.trainable_targets,
        shared_lora_rank=config.model.lora.rank,
    )
    policy = Policy.load(
        config.model,
        TorchSettings(train_dtype="float32", gen_dtype="float32"),
        plan=plan,
        need_reference=False,
        own_generator=True,
    )
    assert policy.separate_generator
    pairs = list(zip(policy.model.named_parameters(), policy.generator.named_parameters(), strict=True))
    frozen = [(p, g) for (_, p), (_, g) in pairs if not p.requires_grad]
    trained = [(p, g) for (_, p), (_, g) in pairs if p.requires_grad]
    assert frozen and trained
    assert all(p.data_ptr() == g.data_ptr() for p, g in frozen)
    assert all(p.data_ptr() != g.data_ptr() for p, g in trained)
    with torch.no_grad():  # an update of the policy's adapters leaves the copy's until the sync
        trained[0][0].add_(1.0)
    assert not torch.equal(trained[0][0], trained[0][1])
    policy.sync_generator()
    assert torch.equal(trained[0][0], trained[0][1])


def two_call_trajectory() -> Trajectory:
    """One rollout whose first call was sampled by weights 0 and its second (after a swap) by 1."""
    p1, r1 = [5, 6, 7], [8, 9]
    p2, r2 = [*p1, *r1, 10, 11], [12, 13, 14]
    return Trajectory(
        trajectory_id="t",
        calls=[
            LLMCall(
                index=0, prompt_ids=p1, response_ids=r1, response_logprobs=[-1.0, -1.0], policy_version=0
            ),
            LLMCall(index=1, prompt_ids=p2, response_ids=r2, response_logprobs=[-1.0] * 3, policy_version=1),
        ],
    )


def test_each_token_gets_the_staleness_of_the_call_that_sampled_it() -> None:
    trajectory = two_call_trajectory()
    samples, _ = merge_calls(trajectory.calls, trajectory_id="t")
    assert call_staleness([trajectory], 1) == [1, 0]
    (tokens,) = sample_staleness(samples, [trajectory], 1)
    assert tokens == [-1, -1, -1, 1, 1, -1, -1, 0, 0, 0]
    metrics = staleness_metrics([1, 0, 0, 0], 2)
    assert metrics["async/staleness_mean"] == 0.25 and metrics["async/staleness_max"] == 1
    assert [metrics[f"async/calls_stale_{k}"] for k in range(3)] == [0.75, 0.25, 0.0]


def one_fresh_one_stale_call(trainer) -> tuple[Sample, list[int]]:
    """A sample of two calls: the engine agrees with the trainer on the first (fresh), and is 4x less
    likely on the second (sampled by older weights); and its per-token staleness."""
    first, second = with_old_logprobs(trainer, fixed_batch()[:1])[0], fixed_batch()[1]
    ids = first.input_ids + second.input_ids
    mask = first.loss_mask + second.loss_mask
    sample = Sample(input_ids=ids, loss_mask=mask, advantages=first.advantages + second.advantages)
    (batch,) = make_micro_batches([sample], 10_000, trainer.pad_id)
    with torch.no_grad():
        trainer_lp = [0.0, *trainer.logprobs(trainer.policy.model, batch)[0][0].tolist()]
    start = len(first.input_ids)
    engine = [
        lp - (math.log(4) if i >= start else 0.0) * m
        for i, (lp, m) in enumerate(zip(trainer_lp, mask, strict=True))
    ]
    staleness = [(1 if i >= start else 0) if m else -1 for i, m in enumerate(mask)]
    return sample.model_copy(update={"old_logprobs": engine}), staleness


def test_importance_weights_correct_the_stale_call_and_leave_the_fresh_one(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, rollout_is="token", rollout_is_threshold=10.0)
    sample, staleness = one_fresh_one_stale_call(trainer)
    (batch,) = make_micro_batches([sample], 10_000, trainer.pad_id)
    with torch.no_grad():
        _, stats = trainer.loss(batch, step_norm([batch.mask]))
    weights = stats["rollout_is_weight"][0]
    stale = torch.tensor(staleness[1:])
    assert torch.allclose(weights[stale == 0], torch.ones(int((stale == 0).sum())), atol=1e-5)
    assert torch.allclose(weights[stale == 1], torch.full((int((stale == 1).sum()),), 4.0), rtol=1e-4)

    metrics = trainer.update([sample], staleness=[staleness])
    assert metrics["rollout_logprob_gap/stale_0"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["rollout_logprob_gap/stale_1"] == pytest.approx(math.log(4), abs=1e-4)
    # The headline gap, which the health rule blames on the weight sync, covers the fresh tokens only.
    assert metrics["rollout_logprob_gap"] == pytest.approx(0.0, abs=1e-5)
    synchronous = trainer.update([sample])
    assert "rollout_logprob_gap/stale_0" not in synchronous  # reported only when asked
    assert synchronous["rollout_logprob_gap"] > 0.1  # every token counts without staleness


def metrics_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def tasks_of(run: Path, step: int) -> list[str]:
    return sorted(t.task_id for t in read_trajectories(run / "rollouts" / f"step_{step}.jsonl"))


@pytest.mark.slow
def test_a_run_one_step_stale_keeps_its_bound_and_resumes_at_the_next_step_with_its_tasks(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three steps, a checkpoint after step 2 while step 3's rollouts were already under way; resuming from
    it runs step 3 alone, on the same tasks, from the checkpoint's weights."""
    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    conf = write_conf(
        workdir,
        tiny_model_dir,
        "stale",
        trainer_common={"total_training_steps": 3, "save_freq": 2, "test_freq": 10, "max_staleness": 1},
    )
    app = make_app(plugins)
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch", "-o", CORRECTED])
    assert result.exit_code == 0, result.output
    (run,) = run_folders(workdir, "stale")
    records = metrics_of(run)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        assert record["async/staleness_max"] <= 1
        assert record["async/calls_stale_0"] + record["async/calls_stale_1"] == pytest.approx(1.0)
        assert record["timing/wait_rollout_s"] >= 0 and record["timing/wait_weights_s"] >= 0
    assert records[0]["async/staleness_max"] == 0  # nothing older than the initial weights
    # Step 2's batch started with step 1's, before the first update: its first calls are one update old.
    assert records[1]["async/calls_stale_1"] > 0
    assert "actor/rollout_logprob_gap/stale_1" in records[1]
    for step in (2, 3):
        versions = {
            c.policy_version
            for t in read_trajectories(run / "rollouts" / f"step_{step}.jsonl")
            for c in t.calls
        }
        assert versions <= {step - 2, step - 1}
    checkpoint = run / "checkpoints" / "step_2"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["data"] == {"epoch": 0, "batch": 2}  # after step 2's batch, not step 3's drawn ahead

    result = CliRunner().invoke(
        app,
        [
            "run",
            "--conf",
            str(conf),
            "--backbone",
            "torch",
            "-o",
            CORRECTED,
            "-o",
            f"trainer_common.resume={checkpoint}",
        ],
    )
    assert result.exit_code == 0, result.output
    resumed = next(p for p in run_folders(workdir, "stale") if p != run)
    assert [r["step"] for r in metrics_of(resumed)] == [3]
    assert tasks_of(resumed, 3) == tasks_of(run, 3)
    step_3 = read_trajectories(resumed / "rollouts" / "step_3.jsonl")
    assert {c.policy_version for t in step_3 for c in t.calls} == {2}  # the checkpoint's weights


def held_rollouts(path: Path) -> list[dict]:
    """The rollouts `tiny_workflows` holds in flight (BT_HOLD_FILE), as far as written."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


@pytest.mark.slow
def test_a_run_killed_mid_save_with_the_next_batch_in_flight_resumes_after_its_last_whole_checkpoint(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL while step 2's checkpoint is half-written in its thread and step 3's six rollouts are under
    way (each held after its first call): the killed run keeps step 1's checkpoint and whole metrics lines
    only; resuming (auto) runs steps 2 and 3 on the killed run's tasks, step 2 from step 1's weights, and
    redraws step 3's rollouts whole instead of training on the killed run's. The killed run is a process
    of its own; the resumed one runs here (one interpreter start less)."""
    conf = write_conf(
        workdir,
        tiny_model_dir,
        "async_killed",
        trainer_common={"total_training_steps": 3, "save_freq": 1, "test_freq": 10, "max_staleness": 1},
        # nothing here compares samples between runs: batches need not wait to gather every request
        rollout={"engines": {"transformers": {"batch_wait_ms": 10, "num_threads": 1}}},
    )
    pause, hold = workdir / "paused", workdir / "held.jsonl"
    env = {
        "BT_PAUSE_SAVE": "2",
        "BT_PAUSE_FILE": str(pause),
        "BT_HOLD_GROUP": "step3-",
        "BT_HOLD_FILE": str(hold),
    }
    process = astuner_run(conf, CORRECTED, env=env)
    deadline = time.monotonic() + 240
    try:
        while not (pause.exists() and len(held_rollouts(hold)) == 6):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the run never saved step 2 with step 3's rollouts in flight"
            time.sleep(0.1)
    finally:
        process.kill()  # SIGKILL: no handler, no flush, no cleanup runs
        process.communicate(timeout=60)
    held = held_rollouts(hold)
    (killed,) = run_folders(workdir, "async_killed")
    half = Path(pause.read_text())
    assert half.parent == killed / "checkpoints" and (half / "model.safetensors").is_file()
    # the half-written save sits in a temporary folder only, which no lookup takes for a checkpoint
    assert sorted(p.name for p in half.parent.iterdir()) == [half.name, "step_1"]
    assert half.name.startswith(".step_2-") and read_checkpoint(half) is None
    assert latest_checkpoint([killed]).step == 1
    text = (killed / "metrics.jsonl").read_text()
    assert text.endswith("\n") and [json.loads(line)["step"] for line in text.splitlines()] == [1]
    assert len(tasks_of(killed, 2)) == 6  # step 2 was trained on (its save was under way)
    assert not (killed / "rollouts" / "step_3.jsonl").exists()  # none of step 3's rollouts ended

    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    resume = ["-o", CORRECTED, "-o", "trainer_common.resume=auto"]
    result = CliRunner().invoke(
        make_app(plugins), ["run", "--conf", str(conf), "--backbone", "torch", *resume]
    )
    assert result.exit_code == 0, result.output
    assert not half.exists()  # resuming cleared the half-written save
    resumed = next(p for p in run_folders(workdir, "async_killed") if p != killed)
    records = metrics_of(resumed)
    assert [r["step"] for r in records] == [2, 3]
    assert sorted(p.name for p in (resumed / "checkpoints").iterdir()) == ["step_2", "step_3"]
    assert tasks_of(resumed, 2) == tasks_of(killed, 2)
    assert tasks_of(resumed, 3) == sorted(h["task_id"] for h in held)
    step_2 = read_trajectories(resumed / "rollouts" / "step_2.jsonl")
    assert {c.policy_version for t in step_2 for c in t.calls} == {1}  # the checkpoint's weights
    step_3 = read_trajectories(resumed / "rollouts" / "step_3.jsonl")
    assert all(len(t.calls) == 2 and t.error is None for t in step_3)
    assert {c.policy_version for t in step_3 for c in t.calls} <= {1, 2}
    # each step trained on the calls of its own six recorded rollouts, whole: none of the killed run's
    # held one-call rollouts joined them (a call with an empty response is not merged)
    for record, rollouts in zip(records, (step_2, step_3), strict=True):
        assert len(rollouts) == 6 and record["train/turns_mean"] == 2
        assert record["train/calls_merged"] == sum(bool(c.response_ids) for t in rollouts for c in t.calls)
    assert not {t.trajectory_id for t in step_3} & {h["rollout_id"] for h in held}


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        {"model": {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}},
        {
            "agents": {"wolf": {"lora": {"rank": 4}}, "seer": {"lora": {"rank": 4}}},
            "rollout": {"agentscope_workflow": "tiny_workflows->TwoAgents", "num_repeat": 2},
        },
    ],
    ids=["lora", "agent_adapters"],
)
def test_adapters_train_one_step_stale_from_their_own_rollout_copy(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, extra: dict
) -> None:
    pytest.importorskip("peft")
    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    trainer_common = {"max_staleness": 1, "test_freq": 10}
    conf = write_conf(workdir, tiny_model_dir, "adapters", trainer_common=trainer_common, **extra)
    result = CliRunner().invoke(
        make_app(plugins), ["run", "--conf", str(conf), "--backbone", "torch", "-o", CORRECTED]
    )
    assert result.exit_code == 0, result.output
    (run,) = run_folders(workdir, "adapters")
    records = metrics_of(run)
    assert [r["step"] for r in records] == [1, 2]
    assert records[1]["async/calls_stale_1"] > 0 and records[1]["async/staleness_max"] == 1
    assert all(r["actor/tokens_trained"] > 0 for r in records)


@pytest.mark.slow
def test_rollouts_generate_while_the_update_runs(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first update holds until a rollout request completes: it would wait forever (here: time out)
    if the update blocked the event loop or the engine."""
    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    seen: dict = {}
    generate, update = TransformersEngine.generate, PolicyTrainer.update

    async def remembering(self, prompt_ids, sampling):
        seen.setdefault("engine", (self, asyncio.get_running_loop()))
        return await generate(self, prompt_ids, sampling)

    def holding(self, samples, *args, **kwargs):
        if "meanwhile" not in seen:
            engine, loop = seen["engine"]
            request = engine.generate([5, 17, 42], SamplingParams(max_tokens=3))
            seen["meanwhile"] = asyncio.run_coroutine_threadsafe(request, loop).result(timeout=60)
        return update(self, samples, *args, **kwargs)

    monkeypatch.setattr(TransformersEngine, "generate", remembering)
    monkeypatch.setattr(PolicyTrainer, "update", holding)
    conf = write_conf(
        workdir,
        tiny_model_dir,
        "overlap",
        trainer_common={"max_staleness": 1, "test_freq": 10, "save_freq": 10},
    )
    result = CliRunner().invoke(
        make_app(plugins), ["run", "--conf", str(conf), "--backbone", "torch", "-o", CORRECTED]
    )
    assert result.exit_code == 0, result.output
    assert seen["meanwhile"].policy_version == 0  # sampled by the copy the update does not touch


@pytest.mark.slow
def test_without_staleness_the_synchronous_loop_runs_and_repeats_itself(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """max_staleness 0 never enters the pipeline, and two runs with one seed end at the same weights and
    metrics (timings aside)."""
    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))

    async def no_pipeline(*_: object) -> None:
        raise AssertionError("max_staleness 0 ran the asynchronous loop")

    monkeypatch.setattr(TorchBackbone, "_async_steps", no_pipeline)
    app = make_app(plugins)
    runs = []
    for name in ("same_a", "same_b"):
        conf = write_conf(workdir, tiny_model_dir, name, trainer_common={"test_freq": 10, "save_freq": 10})
        result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch"])
        assert result.exit_code == 0, result.output
        (run,) = run_folders(workdir, name)
        runs.append(run)
    first, second = (
        [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in metrics_of(run)] for run in runs
    )
    assert first == second and "async/staleness_mean" not in first[0]
    a, b = (weights(run / "checkpoints" / "step_2") for run in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
