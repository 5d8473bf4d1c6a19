"""The sampling loop: finished rows leave the batch, results equal decoding each prompt alone."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.decoding import Sampler, decode, filtered_probs  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

PROMPTS = [[5, 17, 42], [9, 9, 9, 9, 9, 9], [1], [300, 12, 77, 8]]
GREEDY = Sampler(greedy=True)


@pytest.fixture
def model(tiny_model_dir: Path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _decode(model, prompts, limits, stops=frozenset(), sampler=GREEDY):
    return decode(
        model,
        prompts,
        sampler=sampler,
        max_new_tokens=limits,
        stop_ids=[frozenset(stops)] * len(prompts),
        pad_id=0,
    )


def test_rows_leave_the_batch_as_they_finish(model) -> None:
    batch_sizes: list[int] = []
    handle = model.register_forward_hook(
        lambda _m, _a, kw, _o: batch_sizes.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        rows = _decode(model, PROMPTS, [2, 5, 3, 8])
    finally:
        handle.remove()
    assert [len(r.token_ids) for r in rows] == [2, 5, 3, 8]
    assert all(r.finish_reason == "length" for r in rows)
    # prefill with 4 rows, then steps 2..8 with the rows still under their limits
    assert batch_sizes == [4, 4, 3, 2, 2, 1, 1, 1]


def test_batched_greedy_equals_each_prompt_alone(model) -> None:
    together = _decode(model, PROMPTS, [6, 3, 6, 5])
    for prompt, limit, row in zip(PROMPTS, [6, 3, 6, 5], together, strict=True):
        (alone,) = _decode(model, [prompt], [limit])
        assert row.token_ids == alone.token_ids
        assert torch.allclose(torch.tensor(row.logprobs), torch.tensor(alone.logprobs), atol=1e-5)


def test_a_stop_token_ends_its_row_and_is_kept(model) -> None:
    (free,) = _decode(model, [PROMPTS[0]], [6])
    stop = free.token_ids[2]
    first = free.token_ids.index(stop)
    (stopped,) = _decode(model, [PROMPTS[0]], [6], stops={stop})
    assert stopped.token_ids == free.token_ids[: first + 1]
    assert stopped.finish_reason == "stop"


def test_sampled_logprobs_are_of_the_unfiltered_tempered_distribution(model) -> None:
    torch.manual_seed(0)
    sampler = Sampler(temperature=0.7, top_p=0.5, top_k=5)
    (row,) = _decode(model, [PROMPTS[3]], [5], sampler=sampler)
    ids = torch.tensor([PROMPTS[3] + row.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(PROMPTS[3]) - 1 : -1]
    expected = torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(row.token_ids)[:, None])[:, 0]
    assert torch.allclose(expected, torch.tensor(row.logprobs), atol=1e-5)


def test_seeded_sampling_repeats() -> None:
    sampler = Sampler(temperature=1.0)
    logits = torch.randn(3, 50)
    torch.manual_seed(7)
    first = sampler.pick(logits)[0]
    torch.manual_seed(7)
    assert torch.equal(first, sampler.pick(logits)[0])


def test_top_k_and_top_p_filters() -> None:
    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    logprobs = probs.log()
    assert torch.allclose(filtered_probs(logprobs, 1.0, 0), probs)
    assert torch.allclose(filtered_probs(logprobs, 1.0, 2), torch.tensor([[0.5, 0.2, 0, 0, 0]]))
    # nucleus of mass >= 0.8: 0.5 + 0.2 + 0.15
    assert torch.allclose(filtered_probs(logprobs, 0.8, 0), torch.tensor([[0.5, 0.2, 0.15, 0, 0]]))
    # the most likely token always stays
    assert torch.allclose(filtered_probs(logprobs, 0.1, 0), torch.tensor([[0.5, 0, 0, 0, 0]]))
    # top-p applies to what top-k kept: 0.5 / 0.7 already covers 0.7
    assert torch.allclose(filtered_probs(logprobs, 0.7, 2), torch.tensor([[0.5, 0, 0, 0, 0]]))


def test_rows_that_join_a_running_batch_decode_as_alone(model) -> None:
    from astuner_backbone_torch.decoding import RunningBatch

    widths: list[int] = []
    handle = model.register_forward_hook(
        lambda _m, _a, kw, _o: widths.append(kw["attention_mask"].shape[-1]), with_kwargs=True
    )
    finished: list[str] = []
    batch = RunningBatch(model, GREEDY, pad_id=0)
    try:
        (wide,) = batch.add([PROMPTS[1]], [3], [frozenset()], [lambda _: finished.append("wide")])
        batch.step()
        # one step in: the new row is shorter and starts at another position
        (narrow,) = batch.add([PROMPTS[2]], [8], [frozenset()])
        while "wide" not in finished:
            batch.step()
        # the wide row's columns went with it: the step ran the narrow row's own columns only
        assert widths[-1] == len(PROMPTS[2]) + len(narrow.token_ids)
        (late,) = batch.add([PROMPTS[3]], [4], [frozenset()])
        while batch:
            batch.step()
    finally:
        handle.remove()
    for prompt, limit, row in [(PROMPTS[1], 3, wide), (PROMPTS[2], 8, narrow), (PROMPTS[3], 4, late)]:
        (alone,) = _decode(model, [prompt], [limit])
        assert row.token_ids == alone.token_ids
        assert torch.allclose(torch.tensor(row.logprobs), torch.tensor(alone.logprobs), atol=1e-5)


def test_decoding_warns_nothing(model) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _decode(model, PROMPTS, [3, 3, 3, 3])  # transformers 5.24 warned on every call of past_key_values=
    assert [str(w.message) for w in caught] == []


def test_sampling_follows_the_distribution_and_never_picks_a_filtered_token() -> None:
    from astuner_backbone_torch.decoding import inverse_cdf_sample

    torch.manual_seed(0)
    weights = torch.tensor([0.5, 0.0, 0.2, 0.15, 0.1, 0.05, 0.0]) * 3.0  # unnormalised, zeros inside
    tokens = inverse_cdf_sample(weights.expand(40_000, -1).contiguous())
    counts = torch.bincount(tokens, minlength=7).float() / 40_000
    assert counts[1] == 0 and counts[6] == 0
    assert torch.allclose(counts, weights / weights.sum(), atol=0.01)


def test_sampling_across_blocks_follows_the_distribution() -> None:
    """A vocabulary of several `_BLOCK`-sized blocks and a tail, with whole blocks of zeros: the two-level
    draw keeps every token's frequency and never picks a zero."""
    from astuner_backbone_torch.decoding import _BLOCK, inverse_cdf_sample

    torch.manual_seed(1)
    vocab = 3 * _BLOCK + 37
    weights = torch.rand(vocab) ** 4
    weights[_BLOCK : 2 * _BLOCK] = 0  # a whole block of zeros
    weights[::5] = 0
    weights[vocab - 3] = 4.0  # a likely token in the tail
    tokens = inverse_cdf_sample(weights.expand(200_000, -1).contiguous())
    counts = torch.bincount(tokens, minlength=vocab).float() / 200_000
    assert counts[weights == 0].sum() == 0
    assert torch.allclose(counts, weights / weights.sum(), atol=0.004)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_unfiltered_and_greedy_logprobs_are_the_log_softmax(temperature: float) -> None:
    logits = torch.randn(6, 1000) * 4
    expected = torch.log_softmax(logits / temperature, -1)
    for sampler in (Sampler(temperature=temperature), Sampler(greedy=True)):
        tokens, logprobs = sampler.pick(logits)
        want = expected if not sampler.greedy else torch.log_softmax(logits, -1)
        assert torch.allclose(logprobs, want.gather(1, tokens[:, None])[:, 0], atol=1e-5)
