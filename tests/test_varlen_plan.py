"""The torch path's batch plan (kernels/varlen_plan.py): query tiles and length buckets cover
every query once, and attention through many tiles and buckets still matches the naive
references for every variant."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernel_cases import VARIANTS, make_variant, paged_case, prefill_case  # noqa: E402
from kvplan.kernels import varlen_plan  # noqa: E402
from kvplan.kernels.paged_attention import paged_attention  # noqa: E402
from kvplan.kernels.paged_prefill import paged_prefill  # noqa: E402
from kvplan.kernels.reference import paged_attention_reference, paged_prefill_reference  # noqa: E402
from kvplan.kernels.variant import PLAIN  # noqa: E402


def test_bucket_bounds_by_hand() -> None:
    # Two long tiles and two short ones, overhead 50: [0, 2) + [2, 4) costs 2*100 + 50 + 2*10 + 50 =
    # 320,
    # one bucket 4*100 + 50 = 450, four buckets 220 + 200 = 420.
    varlen_plan.BUCKET_OVERHEAD = 50
    try:
        assert varlen_plan._bucket_bounds(np.array([100, 100, 10, 10])) == [(0, 2), (2, 4)]
        varlen_plan.BUCKET_OVERHEAD = 1000  # now one call is cheaper than any split
        assert varlen_plan._bucket_bounds(np.array([100, 100, 10, 10])) == [(0, 4)]
    finally:
        varlen_plan.BUCKET_OVERHEAD = 2048


def test_plans_cover_every_query_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(varlen_plan, "QUERY_TILE", 8)
    monkeypatch.setattr(varlen_plan, "BUCKET_OVERHEAD", 0)
    q_lens, seq_lens = [7, 5, 1, 37, 0], [7, 21, 12, 37, 3]
    _, _, tables, query_start, lens, _ = prefill_case("fp32", torch.float32, q_lens, seq_lens)
    plans = varlen_plan.varlen_plan(tables, query_start, lens, 4, PLAIN, torch.device("cpu"))
    rows = torch.cat([plan.out_rows for plan in plans]).sort().values
    assert rows.tolist() == list(range(sum(q_lens)))
    assert max(plan.max_q for plan in plans) == 8  # the 37-token prompt was cut into tiles
    assert len(plans) > 1


@pytest.mark.parametrize("variant_name", list(VARIANTS))
def test_prefill_through_tiles_and_buckets_matches_reference(
    monkeypatch: pytest.MonkeyPatch, variant_name: str
) -> None:
    monkeypatch.setattr(varlen_plan, "QUERY_TILE", 8)
    monkeypatch.setattr(varlen_plan, "BUCKET_OVERHEAD", 0)
    query, cache, tables, query_start, lens, gen = prefill_case(
        "fp32", torch.float32, [7, 5, 1, 37, 19], [7, 21, 12, 37, 50]
    )
    variant = make_variant(variant_name, 4, gen)
    args = (query, cache.key_cache, cache.value_cache, tables, query_start, lens, 0.25, "fp32")
    torch.testing.assert_close(
        paged_prefill(*args, variant=variant, backend="torch"),
        paged_prefill_reference(*args, variant=variant),
        atol=2e-5,
        rtol=2e-5,
    )


@pytest.mark.parametrize("variant_name", ["plain", "all"])
def test_decode_of_mixed_lengths_splits_into_buckets_and_matches_reference(
    variant_name: str,
) -> None:
    seq_lens = [3, 250, 9, 240, 120, 131, 0, 64, 255, 17] * 3
    cache, tables, lens, gen, _, _ = paged_case("fp32", seq_lens, 4, 4, 2, 16, torch.float32)
    variant = make_variant(variant_name, 4, gen)
    query = torch.randn(len(seq_lens), 4, 16, generator=gen)
    args = (query, cache.key_cache, cache.value_cache, tables, lens, 0.25, "fp32")
    plans = varlen_plan.varlen_plan(
        tables, torch.arange(len(seq_lens) + 1), lens, 4, variant, torch.device("cpu")
    )
    # 3..255 tokens: one padded batch would mostly be padding; a window of 11 reads 3-4 blocks at
    # most
    assert len(plans) > 1 if variant_name == "plain" else len(plans) == 1
    torch.testing.assert_close(
        paged_attention(*args, variant=variant, backend="torch"),
        paged_attention_reference(*args, variant=variant),
        atol=2e-5,
        rtol=2e-5,
    )
