"""An engine `canned`: the same reply to every prompt, for trying a workflow without a model.

It is built from its settings block and the `EngineModel` it serves (here: whose tokens to reply in).
"""

from collections.abc import Sequence

from pydantic import BaseModel

from astuner.api import EngineModel, Generation, Register, SamplingParams, hookimpl, load_tokenizer


class CannedSettings(BaseModel):
    reply: str = "I do not know."


class CannedEngine:
    def __init__(self, settings: CannedSettings, model: EngineModel) -> None:
        tokenizer = load_tokenizer(model.path)
        self.reply = [*tokenizer.encode(settings.reply), tokenizer.end_of_turn_id]

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        ids = self.reply[: sampling.max_tokens]
        finish = "stop" if len(ids) == len(self.reply) else "length"
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish)


@hookimpl
def register_engines(register: Register) -> None:
    register("canned", CannedEngine, settings=CannedSettings, summary="The same reply to every prompt.")
