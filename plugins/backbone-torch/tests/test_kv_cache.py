"""The preallocated KV cache: decoding on it gives the tokens and log-probs of an uncached forward.

The reference below runs every row's whole sequence through a plain forward
at each step (no cache at all) and samples with the same `Sampler`, so the
seeded draws fall the same way; rows join and leave on the same schedule.
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch import kv_cache  # noqa: E402
from astuner_backbone_torch.decoding import DecodedRow, RunningBatch, Sampler  # noqa: E402
from astuner_backbone_torch.kv_cache import GrowingCache, SlotCache, takes_slot_cache  # noqa: E402
from astuner_backbone_torch.packed_decoder import PackedDecoder, packed_decoder  # noqa: E402
from astuner_backbone_torch.prefix_cache import PrefixStore  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

SYSTEM = list(range(100, 130))  # a shared head the prefix store can reuse


@pytest.fixture
def model(tiny_model_dir: Path):
    """The tiny random Qwen2 with its matrices doubled: its next token then depends on the context
    (as loaded, greedy decoding repeats one token whatever came before)."""
    loaded = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for parameter in loaded.parameters():
            if parameter.dim() > 1:
                parameter.mul_(2)
    return loaded


@pytest.fixture(params=["forward", "packed"])
def decoder(request, model) -> PackedDecoder | None:
    """Decoding steps through the model's forward, or through the packed decoder (the engine's default
    on a CPU): both must decode as the uncached forward."""
    if request.param == "forward":
        return None
    packed = packed_decoder(model)
    assert packed is not None
    return packed


class _Uncached:
    """Decodes like `RunningBatch` (same rows, order, finishing and sampler), each step running every
    row's prompt and tokens so far through the model whole."""

    def __init__(self, model, sampler: Sampler) -> None:
        self.model, self.sampler = model, sampler
        self.rows: list[tuple[list[int], int, frozenset[int], DecodedRow]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, prompts, limits, stops) -> list[DecodedRow]:
        outs = [DecodedRow([], [], "length") for _ in prompts]
        self.rows += list(zip(prompts, limits, stops, outs, strict=True))
        return outs

    @torch.inference_mode()
    def step(self) -> None:
        logits = torch.stack(
            [self.model(torch.tensor([[*p, *out.token_ids]])).logits[0, -1] for p, _, _, out in self.rows]
        )
        tokens, logprobs = self.sampler.pick(logits)
        kept = []
        for row, token, logprob in zip(self.rows, tokens.tolist(), logprobs.tolist(), strict=True):
            _, limit, stops, out = row
            out.token_ids.append(token)
            out.logprobs.append(logprob)
            if token in stops:
                out.finish_reason = "stop"
            elif len(out.token_ids) < limit:
                kept.append(row)
        self.rows = kept


# (step before which they join, prompts, limits): rows of different lengths join a running batch,
# the first rows leave at different steps, the late ones fill the freed slots and outgrow the first slots.
SCHEDULE = [
    (0, [[5, 17, 42], [9, 9, 9, 9, 9, 9], [1], [300, 12, 77, 8]], [7, 3, 9, 5]),
    (2, [[44, 45], list(range(200, 214))], [6, 8]),
    (4, [[7], [8, 9, 10], [11, 12, 13, 14, 15]], [4, 10, 6]),
    (9, [[600, 601, 602]], [5]),
]


def _run(batch, schedule=SCHEDULE, stops=frozenset()) -> list[DecodedRow]:
    rows: list[DecodedRow] = []
    step = 0
    pending = list(schedule)
    while pending or batch:
        if pending and pending[0][0] <= step:
            _, prompts, limits = pending.pop(0)
            rows += batch.add(prompts, limits, [frozenset(stops)] * len(prompts))
        if batch:
            batch.step()
        step += 1
    return rows


def _assert_same(rows: list[DecodedRow], expected: list[DecodedRow]) -> None:
    assert [r.token_ids for r in rows] == [r.token_ids for r in expected]
    assert [r.finish_reason for r in rows] == [r.finish_reason for r in expected]
    for row, want in zip(rows, expected, strict=True):
        assert torch.allclose(torch.tensor(row.logprobs), torch.tensor(want.logprobs), atol=1e-5)


def _both(model, sampler: Sampler, seed: int, prefixes=None, stops=frozenset(), decoder=None):
    torch.manual_seed(seed)
    batch = RunningBatch(model, sampler, pad_id=0, prefixes=prefixes, decoder=decoder)
    rows = _run(batch, stops=stops)
    torch.manual_seed(seed)
    expected = _run(_Uncached(model, sampler), stops=stops)
    return batch, rows, expected


def test_the_tiny_model_takes_the_slot_cache(model) -> None:
    assert takes_slot_cache(model)
    batch = RunningBatch(model, Sampler(greedy=True), pad_id=0)
    batch.add([[1, 2, 3]], [2], [frozenset()])
    assert isinstance(batch._kv, SlotCache) and batch.can_join


def test_greedy_rows_joining_and_leaving_decode_as_the_uncached_forward(model, decoder, monkeypatch) -> None:
    monkeypatch.setattr("astuner_backbone_torch.decoding.FIRST_NEW_COLUMNS", 2)  # columns double mid-decode
    batch, rows, expected = _both(model, Sampler(greedy=True), seed=0, decoder=decoder)
    _assert_same(rows, expected)
    assert len({tuple(r.token_ids) for r in rows}) > 5  # the rows' tokens differ: a mix-up would show
    assert batch._kv.slots >= 6 and batch._kv.columns >= 14 + 8  # it grew past its first rows and columns


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "sampler", [Sampler(temperature=0.9, top_k=50, top_p=0.95), Sampler(temperature=1.0)]
)
def test_sampled_rows_joining_and_leaving_decode_as_the_uncached_forward(
    model, decoder, seed: int, sampler: Sampler
) -> None:
    _, rows, expected = _both(model, sampler, seed=seed, decoder=decoder)
    _assert_same(rows, expected)


def test_stop_tokens_end_rows_early_as_in_the_uncached_forward(model, decoder) -> None:
    # frequent tokens of this model: some rows stop after a few tokens, others run to their limit
    stops = frozenset(range(0, 631, 7))
    _, rows, expected = _both(model, Sampler(temperature=1.0), seed=3, stops=stops, decoder=decoder)
    _assert_same(rows, expected)
    assert {r.finish_reason for r in rows} == {"stop", "length"}


def test_with_the_prefix_store_rows_decode_as_the_uncached_forward(model, decoder) -> None:
    store = PrefixStore(4096)
    sampler = Sampler(temperature=1.0)
    first = [[*SYSTEM, 1, 2], [*SYSTEM, 3], [*SYSTEM, 1, 2]]
    torch.manual_seed(5)
    batch = RunningBatch(model, sampler, pad_id=0, prefixes=store, decoder=decoder)
    rows = batch.add(first, [4, 6, 5], [frozenset()] * 3)
    batch.step()
    # a next turn continuing a finished row joins while the others still decode
    while len(rows[0].token_ids) < 4:
        batch.step()
    follow = [*first[0], *rows[0].token_ids, 61, 62]
    rows += batch.add([follow], [5], [frozenset()])
    while batch:
        batch.step()
    assert store.computed_tokens < store.requested_tokens  # the store served part of the prompts
    torch.manual_seed(5)
    reference = _Uncached(model, sampler)
    expected = reference.add(first, [4, 6, 5], [frozenset()] * 3)
    reference.step()
    while len(expected[0].token_ids) < 4:
        reference.step()
    expected += reference.add([follow], [5], [frozenset()])
    while reference:
        reference.step()
    _assert_same(rows, expected)


def test_a_step_writes_the_buffers_in_place(model) -> None:
    batch = RunningBatch(model, Sampler(greedy=True), pad_id=0)
    batch.add([[5, 17, 42], [9, 9]], [12, 12], [frozenset()] * 2)
    batch.step()
    cache = batch._kv
    pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers]
    for _ in range(8):
        batch.step()
    assert [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers] == pointers
    assert cache.lengths[:2].tolist() == [3 + 9, 2 + 9]


def test_a_sliding_window_model_decodes_on_transformers_cache_without_joining(sliding_window_model) -> None:
    model = sliding_window_model
    assert not takes_slot_cache(model)
    sampler = Sampler(temperature=1.0)
    prompts, limits = [[5, 17, 42, 8, 9], [9, 9, 9, 9, 9, 9], [300, 12, 77, 8]], [6, 3, 5]
    torch.manual_seed(0)
    batch = RunningBatch(model, sampler, pad_id=0)
    rows = batch.add(prompts, limits, [frozenset()] * 3)
    assert isinstance(batch._kv, GrowingCache) and not batch.can_join
    while batch:
        batch.step()
    torch.manual_seed(0)
    reference = _Uncached(model, sampler)
    expected = reference.add(prompts, limits, [frozenset()] * 3)
    while reference:
        reference.step()
    _assert_same(rows, expected)


def test_a_long_limit_reserves_a_bounded_width_that_doubles_when_reached(model) -> None:
    batch = RunningBatch(model, Sampler(greedy=True), pad_id=0)
    batch.add([[5, 17, 42]], [100_000], [frozenset()])
    cache = batch._kv
    assert cache.columns == 3 + kv_cache.FIRST_NEW_COLUMNS  # not 100_003 columns of memory
    cache.reserve(1, cache.columns + 1)
    assert cache.columns == 2 * (3 + kv_cache.FIRST_NEW_COLUMNS)
    assert (
        cache.lengths[0] == 3 and torch.all(cache.bias[0, :3] == 0) and torch.all(cache.bias[0, 3:] < -1e30)
    )
