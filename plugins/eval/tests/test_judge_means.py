"""The summary's `judge_metrics` name each judge number as the judge did, a number of one agent too."""

from __future__ import annotations

from astuner_eval.evaluation import eval_metrics, judge_means

from astuner.api import Trajectory


def test_an_agents_judge_metric_keeps_the_name_the_judge_gave_it() -> None:
    games = []
    for share in (0.5, 0.25):
        game = Trajectory(trajectory_id=str(share), agent_rewards={"wolf": 1.0, "seer": -1.0})
        game.metrics.update({"agent/wolf/fallback_share": share, "village_won": 0.0})
        games.append(game)
    metrics = eval_metrics(games, n_samples=1)
    assert metrics["eval/agent/wolf/judge/fallback_share"] == 0.375
    assert judge_means(metrics) == {"agent/wolf/fallback_share": 0.375, "village_won": 0.0}
