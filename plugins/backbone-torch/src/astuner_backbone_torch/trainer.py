"""One policy update from a step's samples: the chosen policy loss + optional KL, accumulated by token budget.

`PolicyTrainer.update(samples)` splits the samples into `mini_batch_num`
mini-batches (one optimizer step each), each into length-bucketed
micro-batches of at most `max_token_len_per_gpu` padded tokens, and
accumulates gradients over the micro-batches with the step-wide
normalisation of `losses.aggregate`. Then: gradient clipping, AdamW, the
learning-rate schedule, and a sync of the rollout copy. The same loop
serves supervised fine-tuning (`objective="likelihood"`, `astuner sft`):
the loss is then the negative log-likelihood of the trained tokens.

The policy loss is the one `trainer_common.algorithm.policy_loss` chose
among the registered ones (`astuner.training.policy_loss`: PPO clip, DAPO,
GSPO, CISPO or a plugin's), a pure function of per-token tensors; the
trainer computes the log-probs, calls it, and aggregates its per-token loss
with the loss's `loss_agg_mode`.

The samples of a GRPO group start with the same prompt. With
`share_prompt_prefix` such samples share a micro-batch whose common prefix
(up to their first trained token) runs through the decoder once, with
gradient; its keys and values, expanded to the group's rows, are the cache
the rows' remaining tokens run on (`models.shared_prefix_hidden`). The
log-probs and gradients are those of running every row whole, up to float
rounding; the prompt's share of the compute (most of it for short replies)
is paid once per group instead of `num_repeat` times.

Two things are not computed because they cannot change the gradient:
samples whose trained tokens all have advantage 0 (a GRPO group with equal
rewards) when there is no KL term, since their policy loss is 0 at any
weights (they still count in the step's normaliser, so the update is the
same as with them; every built-in loss is a multiple of the advantage, and
a plugin's loss that is not trains with `torch.skip_zero_advantage:
false`); and the output layer at untrained positions. Per-token
statistics (entropy, clip fraction) are therefore over the samples that
carry a gradient.

With per-agent adapters (`agents.<name>.lora`) each trained adapter has a
learner of its own (`learners.Learner`: optimizer, schedule, non-finite
counter), and an update trains each adapter, active, on the samples of its
own agent only; an agent without samples that step is left as it was.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from astuner.api import get_logger
from astuner.training import Sample
from astuner_backbone_torch.batching import MicroBatch, make_micro_batches
from astuner_backbone_torch.learners import Learner, Mismatch, UpdateStats
from astuner_backbone_torch.losses import (
    StepNorm,
    aggregate,
    kl_penalty,
    rollout_is_weights,
    token_logprobs,
    token_nll,
)
from astuner_backbone_torch.models import decoder_and_head, shared_prefix_hidden, shares_prefix_exactly
from astuner_backbone_torch.policy import Policy

if TYPE_CHECKING:
    from astuner.training import ChosenLoss

# Fine-tuning weighs every demonstrated token the same, however the conversations split into samples.
LIKELIHOOD_AGG_MODE = "token-mean"

Objective = Literal["policy_gradient", "likelihood"]


@dataclass(frozen=True)
class UpdateSettings:
    """The knobs of an update (`translate.update_settings` reads them from `trainer_common`, `rollout`
    and `torch:`; `translate.sft_update_settings` for fine-tuning).

    `policy_loss`: the chosen loss (`astuner.training.policy_loss`: its
    function, `PolicyLossSettings` and `loss_agg_mode`, which also
    aggregates the KL term); None where only fine-tuning runs, which
    aggregates its log-likelihood by `LIKELIHOOD_AGG_MODE`.
    """

    lr: float = 1e-6
    weight_decay: float = 0.01
    lr_warmup_steps: int = 0
    temperature: float = 1.0
    policy_loss: ChosenLoss | None = None
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    max_tokens: int = 16384
    mini_batch_num: int = 1
    logprob_chunk: int = 1024
    skip_zero_advantage: bool = True
    max_nonfinite_updates: int = 3
    share_prompt_prefix: bool = True
    rollout_is: str | None = None
    rollout_is_threshold: float = 2.0


class PolicyTrainer:
    """Owns the learners of a `Policy` (one, or one per trained adapter: `learners` by adapter name,
    None for the policy's one) and updates it."""

    def __init__(self, policy: Policy, settings: UpdateSettings) -> None:
        self.policy = policy
        self.settings = settings
        names: list[str | None] = [*policy.trained] or [None]
        self.learners: dict[str | None, Learner] = {
            name: Learner(
                policy.trainable_parameters(name),
                lr=settings.lr,
                weight_decay=settings.weight_decay,
                warmup_steps=settings.lr_warmup_steps,
                max_nonfinite=settings.max_nonfinite_updates,
                name=name,
            )
            for name in names
        }
        pad = policy.tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else (policy.tokenizer.eos_token_id or 0)
        self._split_models: dict[int, tuple[Any, Any] | None] = {}
        self._prefix_models: dict[int, bool] = {}

    def logprobs(self, model: Any, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs `(B, L-1)` of each trained next token at the sampling temperature, and entropy.

        Both are computed at trained positions (`batch.mask`) only and are 0
        elsewhere: prompts and padding never go through the output layer.
        With `batch.prefix_ids` the columns are those of the rows (after the
        prefix), as `batch.mask`'s.
        """
        if batch.prefix_ids is not None and not self._shares_prefix(model):
            # A model that runs whole rows only (a reference model that would not split, say).
            logprobs, entropy = self.logprobs(model, batch.unshared())
            return logprobs[:, batch.prefix_length :], entropy[:, batch.prefix_length :]
        picked = batch.mask > 0
        parts = self._parts(model)
        with self.policy.autocast():
            if parts is None:
                logits = model(
                    input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
                ).logits[:, :-1][picked]
            else:
                decoder, head = parts
                if batch.prefix_ids is None:
                    hidden = decoder(
                        input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
                    ).last_hidden_state
                else:
                    hidden = shared_prefix_hidden(
                        decoder, batch.prefix_ids, batch.input_ids, batch.attention_mask
                    )
                logits = head(hidden[:, :-1][picked])
        logprobs, entropy = token_logprobs(
            logits[None],
            batch.targets[picked][None],
            batch.temperatures[picked][None],
            self.settings.logprob_chunk,
        )
        zeros = torch.zeros(picked.shape, dtype=torch.float32, device=picked.device)
        return zeros.masked_scatter(picked, logprobs[0]), zeros.masked_scatter(picked, entropy[0])

    def _parts(self, model: Any) -> tuple[Any, Any] | None:
        if id(model) not in self._split_models:
            self._split_models[id(model)] = decoder_and_head(model)
        return self._split_models[id(model)]

    def _shares_prefix(self, model: Any) -> bool:
        """Whether `model` can run a micro-batch's common prefix once (`models.shared_prefix_hidden`)."""
        # Under gradient checkpointing transformers drops the cache of a training layer (the rows
        # would not see the prefix at all), and a layer recomputed in backward would append the
        # rows' keys and values to it a second time: such a model runs every row whole. (The flag
        # is read off the modules: `is_gradient_checkpointing` warns in transformers 5.)
        if any(getattr(m, "gradient_checkpointing", False) for m in model.modules()):
            return False
        if id(model) not in self._prefix_models:
            parts = self._parts(model)
            self._prefix_models[id(model)] = parts is not None and shares_prefix_exactly(parts[0])
        return self._prefix_models[id(model)]

    def loss(
        self,
        batch: MicroBatch,
        norm: StepNorm,
        ref_logprobs: torch.Tensor | None = None,
        before_update: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This micro-batch's share of the step loss, and per-token statistics `(B, L-1)`
        (`trainer_logprobs` among them: the batch's log-probs, detached).

        The per-token loss is `settings.policy_loss`'s, aggregated by its `loss_agg_mode`.
        With `rollout_correction.rollout_is`, the loss's ratio is taken against the trainer's log-probs
        at the start of the update and each token's loss is weighted by the truncated ratio of
        those to the engine's (`losses.rollout_is_weights`). `before_update`: the trainer's
        log-probs of the batch at the weights the update started from, when this optimizer step is
        not the first of the update (else they are computed here).
        """
        s = self.settings
        if s.policy_loss is None:
            raise ValueError("a policy-gradient update needs UpdateSettings.policy_loss (none was chosen)")
        chosen = s.policy_loss
        logprobs, entropy = self.logprobs(self.policy.model, batch)
        engine = batch.old_logprobs
        old = engine if engine is not None else logprobs.detach()
        if s.rollout_is and engine is not None:
            # The ratio against the trainer's own numbers; the engine's are corrected for by weight.
            old = before_update if before_update is not None else logprobs.detach()
        pg, clipped = chosen.fn(logprobs, old, batch.advantages, batch.mask, chosen.settings)
        stats = {"clip_frac": clipped, "entropy": entropy, "logprob_gap": (logprobs - old).abs()}
        if s.rollout_is and engine is not None:
            weights = rollout_is_weights(old, engine, batch.mask, s.rollout_is, s.rollout_is_threshold)
            pg = pg * weights
            stats["rollout_is_weight"] = weights
            stats["rollout_is_capped_frac"] = (weights >= s.rollout_is_threshold * (1 - 1e-6)).float()
        stats["pg_loss"] = pg
        stats["trainer_logprobs"] = logprobs.detach()
        loss = aggregate(pg, batch.mask, chosen.loss_agg_mode, norm)
        if ref_logprobs is not None:
            kl = kl_penalty(logprobs, ref_logprobs, s.kl_loss_type)
            loss = loss + s.kl_loss_coef * aggregate(kl, batch.mask, chosen.loss_agg_mode, norm)
            stats["kl"] = kl
        return loss, stats

    @torch.no_grad()
    def reference_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        with self.policy.reference_model() as reference:
            return self.logprobs(reference, batch)[0]

    def likelihood_loss(
        self, batch: MicroBatch, norm: StepNorm
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This micro-batch's share of the step's negative log-likelihood (supervised fine-tuning)."""
        logprobs, entropy = self.logprobs(self.policy.model, batch)
        nll = token_nll(logprobs)
        return aggregate(nll, batch.mask, LIKELIHOOD_AGG_MODE, norm), {"nll": nll, "entropy": entropy}

    def update(
        self,
        samples: Sequence[Sample],
        objective: Objective = "policy_gradient",
        *,
        sync_generator: bool = True,
        staleness: Sequence[Sequence[int]] | None = None,
    ) -> dict[str, float]:
        """Train on a step's samples; returns the step's training metrics.

        `objective`: `policy_gradient` (the policy loss on the samples' advantages,
        plus KL when configured) or `likelihood` (supervised fine-tuning: the
        negative log-likelihood of every trained token; advantages unused).
        With per-agent adapters, each trained adapter learns from its agent's
        samples (`sample.agent_name`); the metrics are the totals and, per
        adapter, its own under `<agent>/`; `samples_without_adapter` counts
        samples of agents that train no adapter (skipped).

        `sync_generator=False` leaves the rollout copy as it was: asynchronous rollouts generate from
        it during the update, and the caller syncs it when no batch runs (`Policy.sync_generator`).
        `staleness`: per sample, per token (as `input_ids`), how many updates old the weights that
        sampled it were (-1 where nothing was sampled); given, the gap to the engine's log-probs is
        reported by staleness (`rollout_logprob_gap/stale_<k>`), and the headline `rollout_logprob_gap`,
        `_max` and `rollout_kl` cover the fresh (staleness 0) tokens only: a stale token's gap is the
        policy's own change, not a broken weight sync, which the headline's health rule checks.
        """
        self.policy.model.train()
        stats: dict[str | None, UpdateStats] = {}
        stale_of = (
            {id(x): list(s) for x, s in zip(samples, staleness, strict=True)}
            if staleness is not None
            else None
        )
        gaps: dict[int, Mismatch] = {}
        if None in self.learners:
            stats[None] = self._learn(self.learners[None], samples, objective, stale_of, gaps)
        else:
            for name in self.policy.trained:
                own = [x for x in samples if x.agent_name == name]
                if own:
                    with self.policy.training_adapter(name):
                        stats[name] = self._learn(self.learners[name], own, objective, stale_of, gaps)
        self.policy.model.eval()
        if sync_generator:
            self.policy.sync_generator()
        total = UpdateStats()
        for part in stats.values():
            total.merge(part)
        metrics = total.metrics()
        if self.policy.trained:
            metrics["samples_without_adapter"] = sum(1 for x in samples if x.agent_name not in self.learners)
            for name, part in stats.items():
                metrics.update({f"{name}/{key}": value for key, value in part.metrics().items()})
        for k, gap in sorted(gaps.items()):
            if gap.tokens:
                metrics[f"rollout_logprob_gap/stale_{k}"] = gap.abs_gap / gap.tokens
        return metrics

    def _learn(
        self,
        learner: Learner,
        samples: Sequence[Sample],
        objective: Objective,
        stale_of: dict[int, list[int]] | None = None,
        gaps: dict[int, Mismatch] | None = None,
    ) -> UpdateStats:
        """`mini_batch_num` optimizer steps of `learner` on `samples`, the model as it is set up to run.

        `stale_of` (per-token staleness by `id(sample)`) and `gaps` (filled by staleness): see `update`.
        """
        s = self.settings
        stats = UpdateStats(tokens_trained=sum(sum(x.loss_mask[1:]) for x in samples))
        share = s.share_prompt_prefix and self._shares_prefix(self.policy.model)
        parts = []
        batch_samples: dict[int, list[Sample]] = {}
        for part in _split(list(samples), s.mini_batch_num):
            carrying = [x for x in part if objective == "likelihood" or self._carries_gradient(x)]
            stats.counts["skipped_samples"] += len(part) - len(carrying)
            batches = make_micro_batches(
                carrying, s.max_tokens, self.pad_id, share_prefix=share, temperature=s.temperature
            )
            batch_samples.update({id(b): carrying for b in batches})
            parts.append((sample_norm(part), batches))
        # Importance weights compare the engine with the weights the update started from; optimizer
        # steps after the first need those log-probs computed before the first.
        needs_before = objective == "policy_gradient" and s.rollout_is is not None and len(parts) > 1
        before = (
            [[self._logprobs_before(b) for b in batches] for _, batches in parts[1:]] if needs_before else []
        )
        began = time.perf_counter()
        for number, (norm, batches) in enumerate(parts, 1):
            learner.optimizer.zero_grad(set_to_none=True)
            for index, batch in enumerate(batches, 1):
                _progress(index, len(batches), number, len(parts), batch.real_tokens, began)
                of_batch = batch_samples[id(batch)]
                batch = batch.to(self.policy.device)
                if objective == "likelihood":
                    loss, batch_stats = self.likelihood_loss(batch, norm)
                else:
                    ref = self.reference_logprobs(batch) if s.use_kl_loss else None
                    at_start = before[number - 2][index - 1] if number > 1 and before else None
                    loss, batch_stats = self.loss(batch, norm, ref, at_start)
                    trainer_now = batch_stats.pop("trainer_logprobs")
                    trainer_at_start = trainer_now if number == 1 else at_start
                    if batch.old_logprobs is not None and trainer_at_start is not None:
                        if stale_of is None or gaps is None:
                            stats.mismatch.add(trainer_at_start, batch.old_logprobs, batch.mask)
                        else:
                            # The headline gap (and its health rule) stays about the weight sync and the
                            # dtypes: fresh tokens only; stale ones are reported by staleness.
                            stale = _batch_staleness(batch, of_batch, stale_of)
                            fresh = batch.mask * (stale == 0)
                            stats.mismatch.add(trainer_at_start, batch.old_logprobs, fresh)
                            for k in sorted({int(v) for v in stale[batch.mask > 0].tolist()}):
                                at_k = batch.mask * (stale == k)
                                gaps.setdefault(k, Mismatch()).add(trainer_at_start, batch.old_logprobs, at_k)
                loss.backward()
                stats.totals.add(batch.mask, **batch_stats)
                stats.counts["loss"] += float(loss.detach())
                stats.counts["micro_batches"] += 1
                stats.counts["padded_tokens"] += batch.padded_tokens
                stats.counts["real_tokens"] += batch.real_tokens
            grad_norm = learner.step(s.grad_clip)
            if grad_norm is None:
                stats.counts["skipped_updates"] += 1
            else:
                stats.grad_norms.append(grad_norm)
        stats.lr = learner.scheduler.get_last_lr()[0]
        if stats.grad_norms:  # the schedule counts optimizer steps: none ran when every one was skipped
            learner.scheduler.step()
        learner.optimizer.zero_grad(set_to_none=True)
        return stats

    @torch.no_grad()
    def _logprobs_before(self, batch: MicroBatch) -> torch.Tensor:
        return self.logprobs(self.policy.model, batch.to(self.policy.device))[0]

    def _carries_gradient(self, sample: Sample) -> bool:
        """False when the sample's loss is 0 at any weights: advantage 0 on all trained tokens, no KL."""
        if not self.settings.skip_zero_advantage or self.settings.use_kl_loss:
            return True
        return any(a != 0.0 for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if m)

    def state_dict(self) -> dict[str, Any]:
        """The learners' states: `optimizer` and `scheduler`, or, with per-agent adapters, those of each
        under `adapters.<agent>`."""
        if None in self.learners:
            return self.learners[None].state_dict()
        return {"adapters": {name: learner.state_dict() for name, learner in self.learners.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if None in self.learners:
            self.learners[None].load_state_dict(state)
            return
        for name, learner in self.learners.items():
            learner.load_state_dict(state["adapters"][name])


def _progress(index: int, count: int, part: int, parts: int, tokens: int, began: float) -> None:
    """One line per micro-batch: an update on CPU takes minutes, and should say where it is."""
    where = {"optimizer_step": f"{part}/{parts}"} if parts > 1 else {}
    get_logger().info(
        "update",
        micro_batch=f"{index}/{count}",
        tokens=tokens,
        elapsed_s=round(time.perf_counter() - began, 1),
        **where,
    )


def _batch_staleness(
    batch: MicroBatch, samples: Sequence[Sample], stale_of: dict[int, list[int]]
) -> torch.Tensor:
    """The staleness of each target column of `batch` `(B, L-1)`, -1 where none (see `update`).

    Row `r` holds sample `samples[batch.indices[r]]` from its token `p` (the shared prefix's length)
    on, right-padded; target column `t` is its token `p + t + 1`.
    """
    rows, columns = batch.mask.shape
    out = torch.full((rows, columns), -1, dtype=torch.long)
    first = batch.prefix_length + 1
    for r, index in enumerate(batch.indices):
        tokens = stale_of[id(samples[index])][first : first + columns]
        out[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return out.to(batch.mask.device)


def sample_norm(samples: Sequence[Sample]) -> StepNorm:
    """The step normaliser of `samples` (as `losses.step_norm` of their micro-batch masks)."""
    trained = [sum(x.loss_mask[1:]) for x in samples]
    return StepNorm(max(float(sum(trained)), 1.0), max(float(sum(1 for t in trained if t)), 1.0))


def _split(samples: list[Sample], parts: int) -> list[list[Sample]]:
    """`parts` contiguous, nearly equal slices (fewer when there are fewer samples)."""
    parts = max(1, min(parts, len(samples)))
    size, extra = divmod(len(samples), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(samples[start:end])
        start = end
    return [p for p in out if p]
