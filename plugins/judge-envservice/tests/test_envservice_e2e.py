"""End to end: `astuner run` on the env_agent example, SmolLM2, the reference server as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from astuner_judge_envservice.companions import env_service_companion
from astuner_judge_envservice.settings import EnvServiceSettings
from envservice_helpers import free_port, instance_counts

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "env_agent" / "env_agent.yaml"


@pytest.mark.slow
def test_debug_run_of_the_env_agent_on_smollm2(workdir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    overrides = [
        f"task_reader.env_service.env_url={url}",
        "debug.debug_first_n_tasks=1",
        "debug.num_repeat=2",
        "rollout.multi_turn.max_steps=2",
        "rollout.max_response_length_in_one_turn=16",
    ]
    with env_service_companion(EnvServiceSettings(env_url=url), "guess_number"):
        argv = [sys.executable, "-m", "astuner", "run", "--conf", str(EXAMPLE), "--backbone", "debug"]
        for override in overrides:
            argv += ["-o", override]
        result = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=600)
        counts = instance_counts(url)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "debug rollouts" in result.stdout and "reward" in result.stdout  # the per-episode table
    [log] = list(workdir.glob("launcher_record/env_agent/*/rollouts/debug.jsonl"))
    trajectories = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(trajectories) == 2
    for t in trajectories:
        assert t["error"] is None, t["error"]
        steps = t["metadata"]["env_steps"]
        assert 1 <= len(steps) <= 2 and len(t["metadata"]["step_rewards"]) == len(steps)
        # Every turn's model call is in the record, with its tokens, ahead of the step it chose.
        indices = [s["call_index"] for s in steps]
        assert indices == sorted(indices) and indices[-1] < len(t["calls"])
        assert all(c["response_ids"] and c["response_logprobs"] for c in t["calls"])
        assert isinstance(t["reward"], float) and "env_score" in t["metrics"]
    assert counts["live"] == 0 and counts["created"] == counts["released"] == 2
