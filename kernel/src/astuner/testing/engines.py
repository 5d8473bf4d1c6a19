"""A scripted token engine: deterministic replies, real token ids, no model.

`ScriptedEngine(tokenizer, respond)` answers each call with
`respond(prompt_text)` encoded by the tokenizer plus the end-of-turn token,
every token with log-prob -0.25. It exercises the whole pipeline (tracker,
tool calls, merge, gateway, runner) at the speed of the tokenizer;
`scripted_rollout` runs a config's first validation task through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from astuner.components import build_reader
from astuner.config import AstunerConfig
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.plugins import Plugins
from astuner.rollout.engine import Generation, SamplingParams
from astuner.rollout.stack import rollout_stack, sampling_from_config

LOGPROB = -0.25


class ScriptedEngine:
    """A `TokenEngine` whose replies come from a function of the prompt text."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        respond: Callable[[str], str],
        delay: float = 0.0,
    ) -> None:
        self.tokenizer = tokenizer
        self.respond = respond
        self.delay = delay
        self.calls = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            text = self.respond(self.tokenizer.decode(prompt_ids))
        finally:
            self.in_flight -= 1
        ids = [*self.tokenizer.encode(text), self.tokenizer.end_of_turn_id]
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        return Generation(ids, [LOGPROB] * len(ids), finish)


def scripted_rollout(
    config: AstunerConfig, tokenizer: ChatTokenizer, respond: Callable[[str], str]
) -> Trajectory:
    """One run of `config`'s first validation task through its own rollout stack (reader, workflow,
    judge, tool format) with a `ScriptedEngine` answering `respond(prompt)`; an error of the run fails."""
    plugins = Plugins(load_entry_points=False)
    task = next(iter(build_reader(config, plugins).read("validation")))

    async def main() -> list[Trajectory]:
        engine = ScriptedEngine(tokenizer, respond)
        async with rollout_stack(config, plugins, engine=engine, max_parallel=1) as runner:
            return await runner.run([task], sampling_from_config(config.rollout), progress=False)

    (trajectory,) = asyncio.run(main())
    assert trajectory.error is None, trajectory.error
    return trajectory
