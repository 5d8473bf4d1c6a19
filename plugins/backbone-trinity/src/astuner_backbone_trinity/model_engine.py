"""An astuner token engine over Trinity-RFT's `ModelWrapper`.

`ModelWrapper.generate_async(prompts, **sampling)` passes each prompt to the
inference actor; a prompt given as `{"prompt_token_ids": [...]}` reaches
vLLM as token ids, unchanged (a text prompt would be re-tokenised, which
breaks the token-for-token record training needs). The actor answers with
one `Experience` per sample: `tokens` = prompt + response ids,
`prompt_length`, and `logprobs` of the response tokens (vLLM's `logprobs=0`
asks for the sampled token's own log-prob only).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from astuner.api import AstunerError, Generation, SamplingParams
from astuner.training import FinishReason


class TrinityModelEngine:
    """`TokenEngine` over a Trinity model wrapper; one per run."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.seconds = 0.0

    @staticmethod
    def sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
        """vLLM sampling attributes Trinity's actor sets on its default parameters."""
        kwargs: dict[str, Any] = {
            "n": 1,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_tokens,
            "logprobs": 0,
        }
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        return kwargs

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        started = time.perf_counter()
        prompt = {"prompt_token_ids": list(prompt_ids)}
        experiences = await self.model.generate_async([prompt], **self.sampling_kwargs(sampling))
        self.seconds += time.perf_counter() - started
        if len(experiences) != 1:
            raise AstunerError(f"Trinity's model returned {len(experiences)} samples for one prompt, not 1.")
        exp = experiences[0]
        ids = [int(t) for t in exp.tokens[exp.prompt_length :].tolist()]
        logprobs = exp.logprobs.tolist() if exp.logprobs is not None else []
        if len(logprobs) != len(ids):
            raise AstunerError(
                "Trinity's model returned no log-prob per generated token; astuner trains on them. "
                "Keep model.logprobs set (the translation sets it to 1) in the trinity: block."
            )
        # Trinity's experience carries no finish reason: a reply that filled its budget was cut off.
        finish: FinishReason = "length" if len(ids) >= sampling.max_tokens else "stop"
        return Generation(ids, [float(x) for x in logprobs], finish)
