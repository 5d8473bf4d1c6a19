"""Entry point of `astuner-judge-math`: judges `math_answer` and `math_answer_llm`.

Importing this module is cheap: math-verify (sympy) loads on the first
symbolic comparison, the auxiliary engine on the first LLM verdict.
"""

from __future__ import annotations

from astuner.api import Register, hookimpl
from astuner_judge_math.llm_judge import MathAnswerLlmJudge, MathAnswerLlmSettings
from astuner_judge_math.rule_judge import MathAnswerJudge, MathAnswerSettings


@hookimpl
def register_judges(register: Register) -> None:
    register(
        "math_answer",
        MathAnswerJudge,
        settings=MathAnswerSettings,
        summary="Final answer vs reference: boxed/#### extraction, numeric and symbolic equivalence.",
        old_names=("math_answer_as_judge->MathAnswerAsJudge",),
    )
    register(
        "math_answer_llm",
        MathAnswerLlmJudge,
        settings=MathAnswerLlmSettings,
        summary="math_answer, plus an auxiliary model's verdict where the rule finds no match.",
        old_names=("math_answer_as_judge->MathAnswerAndLlmAsJudge",),
    )
