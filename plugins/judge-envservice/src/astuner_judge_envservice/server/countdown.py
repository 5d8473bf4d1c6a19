"""`countdown`: reach a target number with the given numbers and + - * /.

Each task has 3 or 4 numbers and a target made from some of them, so a
solution always exists. Each number may be used at most once; the server
parses the expression itself (no eval) and answers with its value or what
is wrong with it. Step reward: 1.0 when the target is reached, 0.1 for a
valid expression (right numbers, well formed) that misses, else 0. Score:
1.0 when reached; otherwise 0.5·closeness of the best valid attempt.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from fractions import Fraction
from typing import Any

from astuner_judge_envservice.server.base import Episode, Game, StepResult

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_ANSWER = re.compile(r"answer\s*[:=]\s*([^\n]+)", re.IGNORECASE)
_CANDIDATE = re.compile(r"[\d\s+\-*/()]*\d[\d\s+\-*/()]*")


class ExpressionError(ValueError):
    """Why an expression is not a valid countdown answer."""


def extract_expression(text: str) -> str | None:
    """`Answer: <expr>` if present, else the last stretch of digits and operators with an operator."""
    marked = _ANSWER.findall(text)
    source = marked[-1] if marked else text
    source = source.split("=")[0] if marked else source
    candidates = [c.strip() for c in _CANDIDATE.findall(source) if any(op in c for op in "+-*/")]
    if marked and not candidates:
        candidates = [c.strip() for c in _CANDIDATE.findall(source)]
    return candidates[-1] if candidates else None


def evaluate_expression(expression: str, numbers: list[int]) -> Fraction:
    """The exact value of `expression`, which may use each of `numbers` at most once."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"'{expression}' is not a well-formed expression") from exc
    used: list[int] = []

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError("it divides by zero")
            return _OPS[type(node.op)](left, right)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int)
            and not isinstance(node.value, bool)
        ):
            used.append(node.value)
            return Fraction(node.value)
        raise ExpressionError("only numbers, + - * / and parentheses are allowed")

    result = value(tree.body)
    extra = Counter(used) - Counter(numbers)
    if extra:
        raise ExpressionError(
            f"it uses {', '.join(map(str, sorted(extra.elements())))}, which is not among the available "
            f"numbers {numbers} (each may be used once)"
        )
    return result


class CountdownEpisode(Episode):
    def __init__(self, numbers: list[int], target: int, max_attempts: int = 5) -> None:
        self.numbers, self.target, self.max_attempts = numbers, target, max_attempts
        self.attempts = 0
        self.best_distance: Fraction | None = None
        self.solved = False

    def initial_state(self) -> list[dict[str, Any]]:
        system = (
            "You are solving a countdown puzzle. Combine the given numbers with +, -, * and / "
            "(and parentheses) to reach the target. Each number may be used at most once; you need "
            "not use them all. Reply with one expression in the form 'Answer: <expression>', "
            "for example 'Answer: (3 + 5) * 2'. The user tells you its value if it misses."
        )
        user = (
            f"Numbers: {', '.join(map(str, self.numbers))}. Target: {self.target}. "
            f"You have {self.max_attempts} attempts."
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, text: str) -> StepResult:
        self.attempts += 1
        left = self.max_attempts - self.attempts
        expression = extract_expression(text)
        if expression is None:
            return self._result(
                "I found no expression in your reply. Answer like 'Answer: (3 + 5) * 2'.", 0.0, left
            )
        try:
            result = evaluate_expression(expression, self.numbers)
        except ExpressionError as exc:
            return self._result(f"'{expression}' is not valid: {exc}.", 0.0, left)
        if result == self.target:
            self.solved = True
            return StepResult(
                f"Correct! {expression} = {self.target}.", 1.0, True, {"expression": expression}
            )
        distance = abs(result - self.target)
        if self.best_distance is None or distance < self.best_distance:
            self.best_distance = distance
        shown = str(result) if result.denominator == 1 else f"{float(result):.3f}"
        return self._result(f"{expression} = {shown}, but the target is {self.target}.", 0.1, left)

    def _result(self, feedback: str, reward: float, left: int) -> StepResult:
        if left <= 0:
            return StepResult(f"{feedback} No attempts left.", reward, True)
        return StepResult(f"{feedback} {left} attempts left.", reward, False)

    def score(self, sparse: bool) -> float:
        if self.solved or sparse or self.best_distance is None:
            return float(self.solved)
        closeness = max(Fraction(0), 1 - self.best_distance / self.target)
        return round(0.5 * float(closeness), 4)

    def info(self) -> dict[str, Any]:
        return {
            "game": "countdown",
            "numbers": list(self.numbers),
            "target": self.target,
            "max_attempts": self.max_attempts,
            "attempts": self.attempts,
            "action_format": "Answer: <expression>",
        }


class Countdown(Game):
    name = "countdown"

    def episode(self, task_id: str, params: dict[str, Any]) -> CountdownEpisode:
        rng = self.rng(task_id)
        while True:
            numbers = [rng.randint(1, 12) for _ in range(rng.choice((3, 4)))]
            target = _reachable_target(numbers, rng)
            if target is not None:
                return CountdownEpisode(numbers, target)


def _reachable_target(numbers: list[int], rng: Any) -> int | None:
    """A target built from a random order of (at least two of) the numbers, or None if it is dull."""
    chosen = rng.sample(numbers, rng.randint(2, len(numbers)))
    value = Fraction(chosen[0])
    for n in chosen[1:]:
        op = rng.choice(("+", "-", "*"))
        value = value + n if op == "+" else value - n if op == "-" else value * n
    if value.denominator != 1 or not 2 <= value <= 150 or value in numbers:
        return None
    return int(value)
