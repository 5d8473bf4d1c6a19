"""Token-budget micro-batches: length bucketing, budget, and the next-token layout."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from astuner_backbone_torch.batching import make_micro_batches, plan_micro_batches  # noqa: E402

from astuner.core.trajectory import Sample  # noqa: E402


def test_plan_keeps_every_group_within_budget_and_sorts_by_length() -> None:
    lengths = [50, 10, 30, 10, 200, 40, 20]
    plan = plan_micro_batches(lengths, max_tokens=80)
    assert sorted(i for g in plan for i in g) == list(range(len(lengths)))
    for group in plan:
        longest = max(lengths[i] for i in group)
        assert len(group) * longest <= 80 or len(group) == 1
    flat = [i for g in plan for i in g]
    assert flat == sorted(flat, key=lambda i: (lengths[i], i))  # shortest first, stable
    assert [4] in plan  # longer than the budget: alone


def cost(plan: list[list[int]], lengths: list[int], batch_cost: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) + batch_cost for g in plan)


def best_cost_by_brute_force(lengths: list[int], max_tokens: int, batch_cost: int) -> int:
    """Every way to cut the sorted samples into consecutive groups within the budget."""
    ordered = sorted(lengths)
    n = len(ordered)
    best = None
    for cuts in itertools.product([False, True], repeat=n - 1):
        groups, current = [], [ordered[0]]
        for length, cut in zip(ordered[1:], cuts, strict=True):
            if cut:
                groups.append(current)
                current = []
            current.append(length)
        groups.append(current)
        if any(len(g) > 1 and len(g) * max(g) > max_tokens for g in groups):
            continue
        total = sum(len(g) * max(g) + batch_cost for g in groups)
        best = total if best is None else min(best, total)
    return best


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=9),
    max_tokens=st.integers(20, 200),
    batch_cost=st.integers(0, 40),
)
def test_plan_wastes_the_fewest_tokens(lengths: list[int], max_tokens: int, batch_cost: int) -> None:
    plan = plan_micro_batches(lengths, max_tokens, batch_cost)
    assert cost(plan, lengths, batch_cost) == best_cost_by_brute_force(lengths, max_tokens, batch_cost)


def test_plan_beats_filling_each_batch_to_the_budget() -> None:
    # Greedy filling puts 10, 10, 100 together (300 padded); splitting off 100 pads nothing.
    lengths = [10, 10, 100, 100, 100]
    plan = plan_micro_batches(lengths, max_tokens=300, batch_cost=0)
    assert plan == [[0, 1], [2, 3, 4]]


def test_micro_batch_tensors_are_shifted_for_next_token_prediction() -> None:
    sample = Sample(
        input_ids=[5, 6, 7, 8, 9],
        loss_mask=[0, 0, 1, 1, 0],
        old_logprobs=[0.0, 0.0, -0.5, -0.25, 0.0],
        advantages=[0.0, 0.0, 2.0, 2.0, 0.0],
    )
    short = Sample(input_ids=[1, 2], loss_mask=[0, 1], old_logprobs=[0.0, -1.0], advantages=[0.0, 1.0])
    (batch,) = make_micro_batches([sample, short], max_tokens=100, pad_id=0)
    assert batch.indices == [1, 0]
    assert batch.input_ids.tolist() == [[1, 2, 0, 0, 0], [5, 6, 7, 8, 9]]
    assert batch.attention_mask.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.targets.tolist() == [[2, 0, 0, 0], [6, 7, 8, 9]]
    assert batch.mask.tolist() == [[1, 0, 0, 0], [0, 1, 1, 0]]
    assert batch.old_logprobs.tolist() == [[-1.0, 0, 0, 0], [0, -0.5, -0.25, 0]]
    assert batch.advantages.tolist() == [[1.0, 0, 0, 0], [0, 2.0, 2.0, 0]]
    assert batch.padded_tokens == 10 and batch.real_tokens == 7


def test_missing_old_logprobs_leave_none() -> None:
    sample = Sample(input_ids=[1, 2, 3], loss_mask=[0, 1, 1], advantages=[0, 1, 1])
    (batch,) = make_micro_batches([sample], max_tokens=10, pad_id=0)
    assert batch.old_logprobs is None
