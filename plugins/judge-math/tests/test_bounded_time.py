"""The math judge answers within its time limit whatever a model writes, on any thread.

sympy can compute for hours inside one C call that holds the GIL, so a
hanging check would freeze the pytest process itself: each scenario runs in
a real child interpreter that the test stops on its own time limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from astuner_judge_math.extract import boxed_answers

# Answers a model can write whose value sympy would compute for hours or forever.
HUGE = [
    r"10^{10^{10}}",  # the reported one: a ten-billion-digit integer
    r"2^{2^{2^{2^{2^{2}}}}}",
    r"9^{9^{9}}",
    r"10^{1000000000}",
    r"\sqrt{10^{10^{10}}}",
    r"(10^{10})!",
    r"\left(10^{9}\right)!",
    r"10!!!!!!!!",
    r"\binom{10^{12}}{10^{6}}",
    r"\Gamma(10^{10})",
    r"\prod_{k=1}^{10^{10}} k",
    r"\sum_{k=1}^{10^{12}} k",
    "10**10**10",
    "(" * 60 + "1" + ")" * 60,  # deep nesting: the LaTeX parser backtracks
]
LIMIT_S = 0.5
# Past its limit a check's process is replaced; the next check waits for the new one to load sympy.
LOAD_S = 20.0


def run_child(script: str, timeout_s: float) -> list[dict]:
    """Run `script` in a fresh interpreter; its JSON lines, or a failure saying where it stuck."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        seen = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads(line) for line in done.stdout.splitlines()]
    pytest.fail(f"the judge did not return within {timeout_s} s; it had answered: {seen!r}")


JUDGE_OFF_THE_MAIN_THREAD = """
    import asyncio, json, time
    from concurrent.futures import ThreadPoolExecutor
    from astuner.api import Task, WorkflowOutput
    from astuner_judge_math.compare import equivalent
    from astuner_judge_math.rule_judge import MathAnswerJudge, MathAnswerSettings

    LIMIT = %(limit)r
    checks = [("equal", a, lambda a=a: equivalent(a, "5", timeout_s=LIMIT)) for a in %(huge)r]
    judge = MathAnswerJudge(MathAnswerSettings(symbolic_timeout_s=1))
    task = Task(task_id="t", main_query="q", metadata={"answer": "10"})
    prose = [(a, WorkflowOutput(response=f"So the answer is ${a}$ in the end")) for a in %(prose)r]
    checks += [("judge", a, lambda o=o: asyncio.run(judge.judge(task, o)).reward) for a, o in prose]
    checks += [("after", "sqrt", lambda: equivalent(r"\\sqrt{8}", r"2\\sqrt{2}", timeout_s=30))]
    pool = ThreadPoolExecutor(1)  # judges run off the main thread in Ray workers and thread pools
    for kind, answer, check in checks:
        start = time.monotonic()
        future = pool.submit(check)
        ticks = 0
        while not future.done():  # the main thread runs meanwhile: the GIL is free
            time.sleep(0.01)
            ticks += 1
        print(json.dumps({"kind": kind, "answer": answer, "verdict": future.result(),
                          "seconds": time.monotonic() - start, "ticks": ticks}), flush=True)
"""


@pytest.mark.slow
def test_huge_answers_are_judged_within_the_limit_off_the_main_thread() -> None:
    prose = [r"10^{10^{10}}", r"(10^{10})!"]
    lines = run_child(JUDGE_OFF_THE_MAIN_THREAD % {"limit": LIMIT_S, "huge": HUGE, "prose": prose}, 180)
    verdicts = {(line["kind"], line["answer"]): line["verdict"] for line in lines}
    assert verdicts == {
        **{("equal", a): False for a in HUGE},
        # the whole judge, the answer in prose: wrong (the reference is 10), not stuck
        ("judge", prose[0]): 0.0,
        ("judge", prose[1]): 0.0,
        # and the judge still works after all those checks were cut
        ("after", "sqrt"): True,
    }
    for line in lines:
        assert line["seconds"] < LIMIT_S + LOAD_S, line
    slow = [line for line in lines if line["seconds"] > LIMIT_S / 2]
    assert all(line["ticks"] > 5 for line in slow), slow  # the process was not frozen meanwhile


def test_huge_answers_are_judged_within_the_limit_on_the_main_thread() -> None:
    script = """
        import json, time
        from astuner_judge_math.compare import equivalent
        for answer in (r"10^{10^{10}}", r"(10^{10})!"):
            start = time.monotonic()
            verdict = equivalent(answer, "5", timeout_s=%r)
            print(json.dumps({"verdict": verdict, "seconds": time.monotonic() - start}), flush=True)
    """
    for line in run_child(script % LIMIT_S, 120):
        assert line["verdict"] is False
        assert line["seconds"] < LIMIT_S + LOAD_S


def test_giant_numbers_and_many_boxes_stay_fast() -> None:
    from astuner_judge_math.compare import equivalent
    from astuner_judge_math.extract import extract_prediction

    start = time.monotonic()
    assert equivalent("9" * 1_000_000, "5") is False  # numeric: infinite as a float, no match
    assert extract_prediction("\\boxed{1}" * 50_000) == "1"  # was a rescan of the rest per box
    assert len(boxed_answers("x \\fbox{2} " * 20_000)) == 20_000
    assert time.monotonic() - start < 3


def test_concurrent_checks_agree_with_one_at_a_time() -> None:
    # A generous limit for the honest pairs: the limit is wall time, and this machine may be busy.
    pairs = [
        (r"\sqrt{8}", r"2\sqrt{2}", True, 30),
        ("x^2 + 2x + 1", "(x+1)^2", True, 30),
        (r"\frac{\pi}{2}", r"\pi/2", True, 30),
        ("(2,1)", "(1, 2)", False, 30),
        (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}", True, 30),
    ] * 3
    pairs.insert(4, (r"10^{10^{10}}", "5", False, 1))  # one overrun among them, its process replaced
    script = """
        import json
        from concurrent.futures import ThreadPoolExecutor
        from astuner_judge_math.compare import equivalent
        with ThreadPoolExecutor(8) as pool:
            print(json.dumps(list(pool.map(lambda p: equivalent(p[0], p[1], timeout_s=p[3]), %r))))
    """
    assert run_child(script % pairs, 120) == [[p[2] for p in pairs]]


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads the process tree from /proc")
def test_a_killed_judge_leaves_no_math_verify_process_behind() -> None:
    """kill -9 of the judging process, with one child idle and one busy on a tower: both end."""
    script = """
        import sys, threading
        from astuner_judge_math.compare import equivalent
        assert equivalent(r"\\sqrt{8}", r"2\\sqrt{2}")  # one child, idle afterwards
        print("checked", flush=True)
        threading.Thread(target=equivalent, args=(r"10^{10^{10}}", "5"), kwargs={"timeout_s": 3}).start()
        threading.Thread(target=equivalent, args=(r"9^{9^{9}}", "5"), kwargs={"timeout_s": 3}).start()
        threading.Event().wait()
    """
    judge = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert judge.stdout is not None and judge.stdout.readline() == "checked\n"
        time.sleep(1)  # the towers are being computed now
        children = _children(judge.pid)
        assert children, "the judge started no math-verify process"
        os.kill(judge.pid, signal.SIGKILL)
        judge.wait()
        # an idle child ends on its closed input; a busy one when its own alarm (limit + 1 s) fires
        deadline = time.monotonic() + 3 + 1 + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        if judge.poll() is None:
            judge.kill()
            judge.wait()


def test_a_math_verify_that_cannot_load_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "math_verify"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("math_verify is broken on purpose")\n')
    script = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from astuner.api import AstunerError
        from astuner_judge_math.compare import equivalent
        try:
            equivalent(r"\\sqrt{{8}}", r"2\\sqrt{{2}}")
        except AstunerError as exc:
            print(exc)
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    message = done.stdout.strip()
    assert "\n" not in message and "Traceback" not in message, message
    assert "math judge: its math-verify process" in message
    assert "exited with code 1" in message
    assert "math_verify is broken on purpose" in message
    assert "-m pip install math-verify" in message
