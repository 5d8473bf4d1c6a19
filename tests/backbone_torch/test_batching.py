"""Token-budget micro-batches: length bucketing, budget, and the next-token layout."""

import pytest

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
    assert plan[0] == [1, 3, 6]  # the short ones together, in a stable order
    assert [4] in plan  # longer than the budget: alone


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
