"""Judge `math_answer_llm`: the `math_answer` rule, and an auxiliary model where the rule says no.

The rule decides every match by itself. Only when it finds no match (a
wrong answer, or one written in a form it cannot read) is the auxiliary
model asked, with a fixed rubric, whether the final answer equals the
reference. Its reply must end with a line that is exactly `<Correct>` or
`<NotCorrect>` (and name no other verdict); anything else counts as no
verdict and the rule's "no match" stands. Every call is counted in the
verdict's metrics (`judge/llm_calls`, `judge/llm_seconds`, and the prompt
and response token counts when the engine gives tokens).

The auxiliary model is any installed engine (`engine`, default `openai`)
built with `engine_settings` (that engine's own settings block) through the
`engines` service, for the model named by `model` here (default
`task_judge.alien_llm_model`, the `judge_model` service): its engine sees
that block and that model alone, never the run's config.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from pydantic import Field

from astuner.api import (
    AstunerError,
    ChatEngine,
    ChatTokenizer,
    ClosesAsync,
    ConfigError,
    EngineModel,
    Engines,
    HasTokenizerPath,
    JudgeOutput,
    SamplingParams,
    Task,
    TokenEngine,
    WorkflowOutput,
    get_logger,
    load_tokenizer,
)
from astuner_judge_math.rule_judge import (
    MathAnswerJudge,
    MathAnswerSettings,
    RuleVerdict,
    honoured,
    rule_metrics,
)

KEY = "task_judge.math_answer_llm"
CORRECT, NOT_CORRECT = "<Correct>", "<NotCorrect>"
_VERDICT_TAG = re.compile(r"<(Correct|NotCorrect)>")
_RESPONSE_TAIL_CHARS = 2000

RUBRIC = """You check answers to math problems. You are given a problem, its reference answer, \
and a student's response with the final answer extracted from it (when one could be found).

Decide only whether the student's final answer has the same mathematical value as the reference \
answer. Ignore wording, formatting, units, currency signs and how the answer was reached. \
A response that gives several different final answers, or none, is not correct.

You may reason briefly first. End your reply with one line that is exactly {correct} or \
{not_correct}, and write no other such tag."""

QUESTION = """Problem:
{question}

Reference answer:
{reference}

Student's final answer:
{prediction}

Student's response (its last {tail} characters):
{response}"""


class MathAnswerLlmSettings(MathAnswerSettings):
    """`task_judge.math_answer_llm`: the rule's settings plus how to reach the auxiliary model."""

    engine: str = Field("openai", description="Engine serving the auxiliary model (any installed one).")
    engine_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="That engine's settings block, e.g. {base_url: http://127.0.0.1:8000/v1} for openai.",
    )
    model: str | None = Field(None, description="Auxiliary model; default task_judge.alien_llm_model.")
    max_tokens: int | None = Field(
        None, ge=1, description="Reply budget; default task_judge.alien_llm_response_length."
    )


def parse_verdict(reply: str) -> bool | None:
    """True for `<Correct>`, False for `<NotCorrect>`, None when the reply is not a clean verdict."""
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    if not lines or lines[-1] not in (CORRECT, NOT_CORRECT):
        return None
    if len(set(_VERDICT_TAG.findall(reply))) != 1:
        return None
    return lines[-1] == CORRECT


def rubric_messages(task: Task, output: WorkflowOutput, rule: RuleVerdict) -> list[dict[str, str]]:
    final = output.metadata.get("final_answer")
    response = output.response_text or str(final or "")
    if rule.prediction is not None:
        prediction = rule.prediction
    else:
        prediction = str(final) if final is not None else "(none found)"
    question = QUESTION.format(
        question=task.main_query,
        reference=rule.reference,
        prediction=prediction,
        tail=_RESPONSE_TAIL_CHARS,
        response=response[-_RESPONSE_TAIL_CHARS:] or "(empty)",
    )
    return [
        {"role": "system", "content": RUBRIC.format(correct=CORRECT, not_correct=NOT_CORRECT)},
        {"role": "user", "content": question},
    ]


class MathAnswerLlmJudge:
    """`math_answer`, with an auxiliary model consulted where the rule finds no match.

    `judge_model` (the kernel's `task_judge.alien_llm_model` and
    `alien_llm_response_length`) supplies the model and reply budget that
    the settings leave unset; `engines` builds the engine (default: from
    every installed plugin). `engine` and `tokenizer` may be given directly
    instead.
    """

    def __init__(
        self,
        settings: MathAnswerLlmSettings | None = None,
        engines: Engines | None = None,
        judge_model: EngineModel | None = None,
        *,
        engine: Any = None,
        tokenizer: ChatTokenizer | None = None,
    ) -> None:
        self.settings = settings or MathAnswerLlmSettings()
        self.rule = MathAnswerJudge(self.settings)
        self.model = self.settings.model or (judge_model.path if judge_model else None)
        self.max_tokens = self.settings.max_tokens or (judge_model.max_tokens if judge_model else 512)
        self._seed = judge_model.seed if judge_model else None
        self._engines = engines
        self._engine, self._tokenizer = engine, tokenizer
        self._lock = asyncio.Lock()
        if engine is None and not self.model:
            raise ConfigError(
                f"Judge 'math_answer_llm' needs an auxiliary model: set task_judge.alien_llm_model (or "
                f"{KEY}.model) to the judging model's name, and {KEY}.engine / {KEY}.engine_settings to "
                "reach it, e.g. engine: openai, engine_settings: {base_url: http://127.0.0.1:8000/v1}."
            )
        if engine is None and engines is not None:
            self._require_engine(engines)

    def _require_engine(self, engines: Engines) -> None:
        """Refuse an engine that is not installed now, not at the first verdict (a judge's error
        there is recorded per rollout). No engine is a dependency of this package: `openai`, the
        default, comes with its extra."""
        try:
            engines.require(self.settings.engine, self.served_model(), key=f"{KEY}.engine")
        except ConfigError as exc:
            extra = (
                'So does `pip install "astuner-judge-math[openai]"`. '
                if self.settings.engine == "openai"
                else ""
            )
            raise ConfigError(
                f"Judge 'math_answer_llm' reaches its auxiliary model through engine "
                f"'{self.settings.engine}'. {exc} {extra}Or set {KEY}.engine to an installed engine."
            ) from exc

    def served_model(self) -> EngineModel:
        """The model the auxiliary engine serves: this judge's, never the policy's nor its endpoint."""
        seed = {} if self._seed is None else {"seed": self._seed}
        return EngineModel(path=str(self.model), max_tokens=self.max_tokens, **seed)

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        own = honoured(output)
        if own is not None:
            return own
        rule = self.rule.check(task, output)
        metrics = {**rule_metrics(rule), "judge/llm_calls": 0.0}
        if rule.correct or rule.reference is None:
            return self.rule.verdict(rule.correct, metrics)
        if rule.prediction is None and not (output.response_text or "").strip():
            return self.rule.verdict(False, metrics)
        engine = await self._ready_engine()
        started = time.perf_counter()
        try:
            reply, usage = await self._ask(engine, rubric_messages(task, output, rule))
        except Exception as exc:  # a flaky endpoint must not discard the rollout: the rule stands
            get_logger().warning("auxiliary judge call failed", error=f"{type(exc).__name__}: {exc}")
            metrics.update({"judge/llm_calls": 1.0, "judge/llm_errors": 1.0})
            return self.rule.verdict(False, metrics)
        verdict = parse_verdict(reply)
        metrics.update(usage)
        metrics.update(
            {
                "judge/llm_calls": 1.0,
                "judge/llm_seconds": time.perf_counter() - started,
                "judge/llm_unparsed": float(verdict is None),
                "judge/llm_correct": float(verdict is True),
            }
        )
        return self.rule.verdict(verdict is True, metrics)

    async def _ask(self, engine: Any, messages: list[dict[str, str]]) -> tuple[str, dict[str, float]]:
        """The auxiliary model's reply text, and token counts where the engine reports them."""
        sampling = SamplingParams(temperature=0.0, max_tokens=self.max_tokens)
        if isinstance(engine, TokenEngine):
            tokenizer = self._ready_tokenizer(engine)
            prompt = tokenizer.encode(tokenizer.render(messages, add_generation_prompt=True))
            generation = await engine.generate(prompt, sampling)
            ids = [i for i in generation.token_ids if i != tokenizer.end_of_turn_id]
            usage = {
                "judge/llm_prompt_tokens": float(len(prompt)),
                "judge/llm_response_tokens": float(len(generation.token_ids)),
            }
            return tokenizer.decode(ids), usage
        if isinstance(engine, ChatEngine):
            reply = await engine.chat(messages, None, sampling)
            return reply.content, {}
        raise AstunerError(f"{KEY}.engine '{self.settings.engine}' built neither a token nor a chat engine.")

    async def _ready_engine(self) -> Any:
        async with self._lock:
            if self._engine is None:
                self._engine = self._build_engine()
            return self._engine

    def _build_engine(self) -> Any:
        engines = self._engines if self._engines is not None else Engines.installed()
        where = f"{KEY}.engine_settings"
        try:
            return engines.build(
                self.settings.engine, self.settings.engine_settings, self.served_model(), key=where
            )
        except ConfigError:
            raise
        except AstunerError as exc:
            raise ConfigError(
                f"{KEY}: building the auxiliary engine '{self.settings.engine}' failed: {exc} "
                f"Its settings go in {where}."
            ) from exc

    def _ready_tokenizer(self, engine: Any) -> ChatTokenizer:
        if self._tokenizer is None:
            own = getattr(engine, "tokenizer", None)
            path = engine.tokenizer_path if isinstance(engine, HasTokenizerPath) else None
            if not isinstance(own, ChatTokenizer):
                own = load_tokenizer(path or str(self.model))
            self._tokenizer = own
        return self._tokenizer

    async def aclose(self) -> None:
        if isinstance(self._engine, ClosesAsync):
            await self._engine.aclose()
