"""The viewer per agent: the list filtered by agent, per-agent rewards, each call's agent and adapter.

Records are multi-agent games built with the trajectory models (see
`logview_records.write_werewolf_run`), served by a real viewer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from logview_records import ADAPTERS, GAMES, write_werewolf_metrics, write_werewolf_run

RUN = "werewolf/20260104-050607"


@pytest.fixture
def viewer(serve, tmp_path: Path, calc_run: Path):
    write_werewolf_run(tmp_path, calc_run)
    return serve(tmp_path)


def get(viewer, path: str, **params) -> dict:
    response = httpx.get(viewer.url.rstrip("/") + path, params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("filters", "games"),
    [
        ({}, [0, 1, 2, 3, 4]),
        ({"agent": "wolf"}, [0, 1, 2]),
        ({"agent": "seer"}, [0, 1, 2, 3, 4]),
        ({"agent": "nobody"}, []),
        ({"agent": "wolf", "task": "g2"}, []),
        # With an agent, the reward bounds apply to that agent's own reward, not the game's mean.
        ({"min_reward": 1.0}, [4]),
        ({"agent": "wolf", "min_reward": 1.0}, [0]),
        ({"agent": "villager", "min_reward": 1.0}, [1, 4]),
        ({"agent": "seer", "max_reward": 0.0}, [0]),
    ],
)
def test_the_list_filters_by_agent(viewer, filters: dict, games: list[int]) -> None:
    page = get(viewer, "/api/trajectories", run=RUN, **filters)
    assert [item["trajectory_id"] for item in page["items"]] == [f"game-{k}" for k in games]
    assert page["total"] == len(games)
    assert page["agents"] == ["seer", "villager", "wolf"]
    assert page["trajectories"] == len(GAMES)


def test_the_list_has_each_agents_reward(viewer) -> None:
    items = get(viewer, "/api/trajectories", run=RUN)["items"]
    for item, (group, rewards) in zip(items, GAMES, strict=True):
        assert item["group_id"] == group
        assert item["agent_rewards"] == rewards
        assert item["agents"] == list(rewards)  # in order of their first call
        assert item["reward"] == pytest.approx(sum(rewards.values()) / len(rewards))
        assert item["turns"] == 2 * len(rewards)


def test_the_view_shows_each_calls_agent_adapter_and_advantage(viewer) -> None:
    view = get(viewer, "/api/trajectory", run=RUN, file="step_1.jsonl", line=0)
    assert view["agent_rewards"] == GAMES[0][1]
    turns = view["turns"]
    assert [(t["agent"], t["adapter"]) for t in turns] == 2 * [(a, ADAPTERS[a]) for a in GAMES[0][1]]
    agents = {a["name"]: a for a in view["agents"]}
    assert list(agents) == ["wolf", "seer", "villager"]
    for name, agent in agents.items():
        assert agent["reward"] == GAMES[0][1][name]
        assert agent["adapters"] == [ADAPTERS[name]]
        assert (agent["calls"], agent["samples"]) == (2, 1)
        assert agent["advantages"] == [t["advantage"] for t in turns if t["agent"] == name]
        assert agent["zero_variance"] is False
    # Grouped per agent over the three games of g1: the wolf won this one, the seer and villager lost it.
    assert agents["wolf"]["advantages"][0] > 0 > agents["seer"]["advantages"][0]
    assert agents["villager"]["advantages"][0] < 0
    samples = {s["agent"]: s for s in view["samples"]}
    assert {name: s["adapters"] for name, s in samples.items()} == {a: [ADAPTERS[a]] for a in agents}
    assert samples["wolf"]["calls"] == [0, 3]
    assert view["advantage"]["zero_variance"] is False

    # In g2 the seer won both games: its group has no variance, the villager's has.
    g2 = get(viewer, "/api/trajectory", run=RUN, file="step_1.jsonl", line=3)
    flat = {a["name"]: a["zero_variance"] for a in g2["agents"]}
    assert flat == {"seer": True, "villager": False}
    assert g2["advantage"]["zero_variance"] is False


def test_each_agents_metrics_come_as_a_chart_section_of_its_own(
    serve, tmp_path: Path, calc_run: Path
) -> None:
    """Reward, win rate, calls, tokens and the judge's numbers of an agent share the group
    "agent: <name>"; the judge's `agent/<agent>/<metric>` is one of them, not a `judge/` metric."""
    run = write_werewolf_run(tmp_path, calc_run)
    rows = write_werewolf_metrics(run)
    answer = get(serve(tmp_path), "/api/metrics", run=RUN)
    assert answer["rows"] == rows
    groups: dict[str, dict[str, None]] = {}
    for metric in answer["metrics"]:
        groups.setdefault(metric["group"], {})[metric["label"]] = None
    assert [g for g in groups if g.startswith("agent")] == ["agent: seer", "agent: villager", "agent: wolf"]
    assert list(groups["agent: wolf"]) == [
        "wolf: mean judge reward",
        "wolf: win rate",
        "wolf: model calls per episode",
        "wolf: response tokens per episode",
        "wolf: choices",
        "wolf: fallback_share",
    ]
    assert list(groups["judge"]) == ["village_won"]
    by_key = {m["key"]: m for m in answer["metrics"]}
    share = by_key["train/agent/seer/judge/fallback_share"]
    assert (share["pattern"], share["split"]) == ("{split}/agent/{name}/judge/{metric}", "train")
    assert [row["train/agent/seer/judge/fallback_share"] for row in rows] == pytest.approx(
        [0.7, 0.35, 0.7 / 3]
    )
    assert not any("/judge/agent/" in key for row in rows for key in row)
