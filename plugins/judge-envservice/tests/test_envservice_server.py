"""The reference EnvService over real HTTP: protocol, games, and every kind of bad request."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import httpx
import pytest
from astuner_judge_envservice.server import GAMES, create_app
from astuner_judge_envservice.server.countdown import evaluate_expression, extract_expression
from astuner_judge_envservice.server.guess_number import parse_guess
from envservice_helpers import LoopbackServer, bisect, free_port, instance_counts, serve_process

from astuner.serving import ThreadedServer


def post(url: str, endpoint: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/{endpoint}", json=body, timeout=10)


def create(url: str, env_type: str, task_id: str) -> tuple[str, list[dict]]:
    reply = post(url, "create", env_type=env_type, task_id=task_id)
    assert reply.status_code == 200, reply.text
    data = reply.json()["data"]
    return data["info"]["instance_id"], data["state"]


def test_healthz_and_deterministic_task_ids(server: LoopbackServer) -> None:
    assert httpx.get(f"{server.url}/healthz").text == "OK"
    train = post(server.url, "get_env_profile", env_type="guess_number", params={"split": "train"}).json()
    dev = post(server.url, "get_env_profile", env_type="guess_number", params={"split": "validation"}).json()
    assert (
        train["success"] and train["data"][:2] == ["train-0000", "train-0001"] and len(train["data"]) == 1000
    )
    assert dev["data"][0] == "dev-0000"
    bad = post(server.url, "get_env_profile", env_type="guess_number", params={"split": "holdout"})
    assert bad.status_code == 400 and "unknown split 'holdout'" in bad.json()["detail"]
    # The same task is the same puzzle in every server.
    _, first = create(server.url, "countdown", "train-0005")
    _, again = create(server.url, "countdown", "train-0005")
    assert first == again and first[0]["role"] == "system" and first[1]["role"] == "user"


def play_by_bisection(url: str, task_id: str) -> tuple[str, int, list[float]]:
    instance, state = create(url, "guess_number", task_id)
    transcript, rewards, done = state[1]["content"], [], False
    while not done:
        action = {"role": "assistant", "content": bisect(transcript)}
        step = post(url, "step", env_type="guess_number", instance_id=instance, messages=action).json()[
            "data"
        ]
        transcript += "\n" + step["state"][0]["content"]
        rewards.append(step["reward"])
        done = step["is_terminated"]
    assert rewards[-1] == 1.0 and "Correct" in transcript, transcript
    return instance, len(rewards), rewards


def test_guess_number_is_won_by_bisection_over_several_turns(server: LoopbackServer) -> None:
    turns = []
    for i in range(10):
        instance, n, rewards = play_by_bisection(server.url, f"train-{i:04d}")
        assert rewards[:-1] == [0.1] * (n - 1)  # every bisecting guess is a useful one
        turns.append(n)
    assert max(turns) >= 4  # several turns, with the feedback of each
    score = post(server.url, "evaluate", instance_id=instance, params={"sparse": False}).json()["data"]
    assert score == 1.0
    info = post(server.url, "get_info", instance_id=instance).json()["data"]
    assert info["game"] == "guess_number" and info["terminated"] and len(info["guesses"]) == turns[-1]
    again = post(server.url, "step", instance_id=instance, messages={"role": "assistant", "content": "1"})
    assert again.status_code == 400 and "is over" in again.json()["detail"]
    assert post(server.url, "release", instance_id=instance).json() == {"success": True, "data": None}
    counts = server.counts()
    assert (counts["live"], counts["created"], counts["released"], counts["peak_live"]) == (9, 10, 1, 10)


def test_guess_number_scores_progress_below_one_when_unsolved(server: LoopbackServer) -> None:
    instance, state = create(server.url, "guess_number", "train-0001")
    high = int(state[1]["content"].split("between 1 and ")[1].split(".")[0])
    reply = post(
        server.url, "step", instance_id=instance, messages={"role": "assistant", "content": "no idea"}
    )
    assert "found no number" in reply.json()["data"]["state"][0]["content"]
    assert post(server.url, "evaluate", instance_id=instance).json()["data"] == 0.0
    mid = (1 + high) // 2
    secret_side = post(
        server.url, "step", instance_id=instance, messages={"role": "assistant", "content": f"{mid}"}
    )
    step = secret_side.json()["data"]
    dense = post(server.url, "evaluate", instance_id=instance).json()["data"]
    sparse = post(server.url, "evaluate", instance_id=instance, params={"sparse": True}).json()["data"]
    if step["reward"] == 1.0:  # the secret was the midpoint
        assert dense == sparse == 1.0
    else:
        assert step["reward"] == 0.1 and 0.0 < dense < 0.5 and sparse == 0.0


def solve_countdown(numbers: list[int], target: int) -> str | None:
    """Brute force over orders, operators and left-nested/paired groupings (small inputs only)."""
    for size in range(2, len(numbers) + 1):
        for picked in itertools.permutations(numbers, size):
            for ops in itertools.product("+-*/", repeat=size - 1):
                expression = str(picked[0])
                for op, n in zip(ops, picked[1:], strict=True):
                    expression = f"({expression} {op} {n})"
                try:
                    if evaluate_expression(expression, numbers) == target:
                        return expression
                except ValueError:
                    continue
    return None


def test_countdown_checks_expressions_and_is_solvable(server: LoopbackServer) -> None:
    instance, state = create(server.url, "countdown", "train-0002")
    text = state[1]["content"]
    numbers = [int(n) for n in text.split("Numbers: ")[1].split(".")[0].split(", ")]
    target = int(text.split("Target: ")[1].split(".")[0])
    foreign = max(numbers) + 100
    wrong = post(
        server.url,
        "step",
        instance_id=instance,
        messages={"role": "assistant", "content": f"Answer: {foreign} + 1"},
    )
    feedback = wrong.json()["data"]
    assert f"uses {foreign}" in feedback["state"][0]["content"] and feedback["reward"] == 0.0
    solution = solve_countdown(numbers, target)
    assert solution is not None, f"countdown task {numbers} -> {target} has no solution"
    right = post(
        server.url,
        "step",
        instance_id=instance,
        messages={"role": "assistant", "content": f"Answer: {solution}"},
    )
    assert right.json()["data"]["is_terminated"] and right.json()["data"]["reward"] == 1.0
    assert post(server.url, "evaluate", instance_id=instance).json()["data"] == 1.0


def test_action_parsing() -> None:
    assert parse_guess("I think... Guess: 37") == 37
    assert parse_guess("maybe 12 or 40") == 40
    assert parse_guess("no digits") is None
    assert extract_expression("I'll try (3 + 5) * 2 = 16") == "(3 + 5) * 2"
    assert extract_expression("Answer: 7*3 - 1") == "7*3 - 1"
    assert evaluate_expression("(3 + 5) / 2", [3, 5, 2]) == Fraction(4)
    with pytest.raises(ValueError, match="uses 3, 3"):
        evaluate_expression("3 * 3 * 3", [3, 4])
    with pytest.raises(ValueError, match="only numbers"):
        evaluate_expression("__import__('os')", [1])


def test_malformed_actions_get_400_with_the_reason(server: LoopbackServer) -> None:
    instance, _ = create(server.url, "guess_number", "train-0000")
    cases = [
        ("guess 5", "needs the action in 'messages'"),
        ({"role": "assistant"}, "needs the action in 'messages'"),
        ({"role": "user", "content": "5"}, "role must be 'assistant'"),
        ({"role": "assistant", "content": {"nested": 1}}, "content must be text"),
    ]
    for messages, reason in cases:
        reply = post(server.url, "step", instance_id=instance, messages=messages)
        assert reply.status_code == 400 and reason in reply.json()["detail"], (messages, reply.text)
    blocks = [{"type": "text", "text": "Guess: 1"}, {"type": "tool_use", "name": "x"}]
    ok = post(server.url, "step", instance_id=instance, messages={"role": "assistant", "content": blocks})
    assert ok.status_code == 200 and ok.json()["data"]["info"].get("guess", 1) == 1


def test_unknown_instances_tasks_and_env_types_get_400(server: LoopbackServer) -> None:
    for endpoint in ("step", "evaluate", "get_info", "release"):
        reply = post(
            server.url, endpoint, instance_id="exp_0_nothere", messages={"role": "assistant", "content": "1"}
        )
        assert reply.status_code == 400, endpoint
        assert "unknown instance 'exp_0_nothere'" in reply.json()["detail"]
    missing = post(server.url, "step", messages={"role": "assistant", "content": "1"})
    assert missing.status_code == 400 and "needs 'instance_id'" in missing.json()["detail"]
    task = post(server.url, "create", env_type="guess_number", task_id="train-99999")
    assert task.status_code == 400 and "unknown task id 'train-99999'" in task.json()["detail"]
    env = post(server.url, "create", env_type="appworld", task_id="train-0000")
    assert env.status_code == 400 and "env_type 'appworld' is not served" in env.json()["detail"]
    first, _ = create(server.url, "guess_number", "train-0000")
    dup = post(server.url, "create", env_type="guess_number", task_id="train-0000", instance_id=first)
    assert dup.status_code == 400 and "already exists" in dup.json()["detail"]


def test_invalid_json_bodies_get_400(server: LoopbackServer) -> None:
    raw = httpx.post(
        f"{server.url}/create",
        content=b'{"env_type": "guess_number", ',
        headers={"content-type": "application/json"},
    )
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["detail"]
    typed = post(server.url, "create", env_type="guess_number", task_id=["train-0000"])
    assert typed.status_code == 400 and "task_id" in typed.json()["detail"]
    extra = post(server.url, "create", env_type="guess_number", task_id="train-0000", colour="red")
    assert extra.status_code == 400 and "colour" in extra.json()["detail"]
    assert server.counts()["live"] == 0


def test_the_instance_cap_answers_503() -> None:
    capped = LoopbackServer(max_instances=2)
    with capped.server:
        for i in range(2):
            create(capped.url, "guess_number", f"train-000{i}")
        full = post(capped.url, "create", env_type="guess_number", task_id="train-0002")
        assert full.status_code == 503 and "cap (--max-instances 2)" in full.json()["detail"]


def test_a_fault_in_a_game_is_a_500(server: LoopbackServer) -> None:
    # The hang game reads params.hang as a number; a string is a server-side fault, not a 400.
    instance, _ = create(server.url, "hang", "train-0000")
    broken = post(server.url, "create", env_type="hang", task_id="train-0001", params={"hang": "soon"})
    assert broken.status_code == 500 and "ValueError" in broken.json()["detail"]
    assert post(server.url, "release", instance_id=instance).status_code == 200


@pytest.mark.slow
def test_idle_instances_expire_in_the_served_process() -> None:
    port = free_port()
    with serve_process(port, "--idle-timeout", "0.3"):
        url = f"http://127.0.0.1:{port}"
        instance, _ = create(url, "guess_number", "train-0000")
        deadline = time.monotonic() + 10
        while instance_counts(url)["expired"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert instance_counts(url)["live"] == 0 and instance_counts(url)["expired"] == 1
        gone = post(url, "step", instance_id=instance, messages={"role": "assistant", "content": "1"})
        assert gone.status_code == 400 and "expired after 0.3 s" in gone.json()["detail"]


def timed_step(url: str, instance: str, guess: str) -> tuple[float, float]:
    """When one `/step` began and ended (monotonic seconds); asserts that it succeeded."""
    began = time.monotonic()
    reply = post(url, "step", instance_id=instance, messages={"role": "assistant", "content": guess})
    assert reply.status_code == 200, reply.text
    return began, time.monotonic()


def test_a_step_delay_slows_each_step_without_blocking_other_instances() -> None:
    delay = 0.2
    app = create_app({"guess_number": GAMES["guess_number"]()}, step_delay=delay)
    with ThreadedServer(app) as served:
        first, _ = create(served.url, "guess_number", "train-0000")
        second, _ = create(served.url, "guess_number", "train-0001")
        began, ended = timed_step(served.url, first, "Guess: 1")
        assert ended - began >= delay
        with ThreadPoolExecutor(2) as pool:
            spans = list(pool.map(lambda i: timed_step(served.url, i, "Guess: 2"), [first, second]))
        assert all(end - start >= delay for start, end in spans)
        # Each step awaits its delay on the server's loop, so the two waits overlap: one after the
        # other would end no earlier than the second delay after the first began.
        assert max(end for _, end in spans) - min(start for start, _ in spans) < 2 * delay
        # /create and the other endpoints are not delayed.
        began = time.monotonic()
        assert post(served.url, "get_info", instance_id=first).status_code == 200
        assert time.monotonic() - began < delay
    with pytest.raises(ValueError, match="step_delay"):
        create_app({}, step_delay=-1)


@pytest.mark.slow
def test_the_step_delay_option_of_the_served_process() -> None:
    port = free_port()
    with serve_process(port, "--step-delay", "0.3"):
        url = f"http://127.0.0.1:{port}"
        instance, _ = create(url, "guess_number", "train-0000")
        began, ended = timed_step(url, instance, "Guess: 1")
        assert ended - began >= 0.3
