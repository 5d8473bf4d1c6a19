"""Madness checks and how a flagged trajectory is treated."""

from __future__ import annotations

from astuner.core.madness import (
    MadnessCheck,
    MadnessMonitor,
    NonAsciiCheck,
    NonAsciiSettings,
    NonsenseCheck,
    NonsenseSettings,
    WrongToolCallCheck,
    apply_madness_reward,
    longest_repeat,
)
from astuner.core.trajectory import LLMCall, ToolCallError, Trajectory


def test_longest_repeat():
    assert longest_repeat([], 4) == (0, 0.0)
    assert longest_repeat([1, 2, 3, 4], 4) == (0, 0.0)
    n, copies = longest_repeat([9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 7], 8)
    assert (n, copies) == (3, 3.0)
    assert longest_repeat([5] * 10, 4) == (1, 10.0)


def test_nonsense():
    chk = NonsenseCheck()
    assert chk.check(LLMCall(text="A normal answer.", response_ids=list(range(60)))) is None
    stray = chk.check(LLMCall(text="answer<|im_start|>user", response_ids=[1, 2]))
    assert stray == "stray special token '<|im_start|>'"
    loop = chk.check(LLMCall(text="x", response_ids=[7, 8, 9, 10] * 20))
    assert loop == "a 4-gram repeated 20 times"
    short = NonsenseCheck(NonsenseSettings(min_span=100))
    assert short.check(LLMCall(text="x", response_ids=[7, 8, 9, 10] * 20)) is None
    # An engine without token ids: loops are found in the characters.
    assert "repeated" in chk.check(LLMCall(text="ha" * 40))


def test_wrong_toolcall_and_non_ascii():
    err = ToolCallError(id="call_0", raw="<tool_call>x", error="unclosed <tool_call>")
    assert WrongToolCallCheck().check(LLMCall(tool_call_errors=[err])) == (
        "1 malformed tool call(s), first: unclosed <tool_call>"
    )
    assert WrongToolCallCheck().check(LLMCall()) is None
    assert NonAsciiCheck().check(LLMCall(text="plain")) is None
    assert NonAsciiCheck().check(LLMCall(text="naïve")) == "1 non-ASCII characters out of 5"
    assert NonAsciiCheck(NonAsciiSettings(max_fraction=0.5)).check(LLMCall(text="naïve")) is None


def test_monitor_and_reward():
    checks = {"nonsense": NonsenseCheck(), "wrong_toolcall": WrongToolCallCheck()}
    assert all(isinstance(c, MadnessCheck) for c in checks.values())
    monitor = MadnessMonitor(checks, terminate=False)
    assert monitor.observe(LLMCall(text="fine")) == [] and not monitor.should_stop
    hits = monitor.observe(LLMCall(text="<|endoftext|>"))
    assert hits == ["nonsense: stray special token '<|endoftext|>'"]
    assert monitor.flags == hits and not monitor.should_stop
    assert MadnessMonitor(checks, terminate=True).observe(LLMCall(text="<|x|>"))
    flagged = Trajectory(trajectory_id="t", reward=[1.0, 1.0], madness=hits)
    assert apply_madness_reward(flagged, -1.0).reward == -1.0
    clean = Trajectory(trajectory_id="u", reward=0.5)
    assert apply_madness_reward(clean, -1.0).reward == 0.5


def test_with_per_agent_rewards_only_the_flagged_agent_is_penalised():
    calls = [LLMCall(index=0, agent_name="wolf", madness=["nonsense"]), LLMCall(index=1, agent_name="seer")]
    t = Trajectory(
        trajectory_id="t", calls=calls, reward=0.5, agent_rewards={"wolf": 1.0, "seer": 0.0}, madness=["x"]
    )
    apply_madness_reward(t, -1.0)
    assert t.agent_rewards == {"wolf": -1.0, "seer": 0.0} and t.reward == -0.5
    whole = Trajectory(trajectory_id="u", reward=0.5, agent_rewards={"wolf": 1.0, "seer": 0.0}, madness=["x"])
    assert apply_madness_reward(whole, -1.0).agent_rewards == {"wolf": -1.0, "seer": -1.0}
