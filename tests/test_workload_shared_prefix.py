"""Shared-prefix workloads: real token ids, designed sharing, Zipf popularity, chat growth,
bound."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from kvplan.core.hashing import infinite_cache_hit_tokens
from kvplan.workload import WORKLOAD_KINDS, Request, make_workload
from kvplan.workload.shared_prefix import SHARED_PREFIX_KINDS, chat, few_shot, rag, system_prompt

KINDS = SHARED_PREFIX_KINDS


def _harmonic(n: int, s: float) -> float:
    return sum(r**-s for r in range(1, n + 1))


def _sessions(reqs: list[Request]) -> dict[str, list[Request]]:
    by_session: dict[str, list[Request]] = defaultdict(list)
    for r in reqs:
        by_session[r.session_id].append(r)  # requests are in arrival order, so turns are too
    return by_session


def test_kinds_reach_the_dispatcher() -> None:
    assert KINDS == ("system-prompt", "rag", "chat", "few-shot")
    assert set(KINDS) <= set(WORKLOAD_KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_ids_in_arrival_order_real_tokens(kind: str) -> None:
    a = make_workload(kind, 300, rate=3.0, seed=5)
    assert a == make_workload(kind, 300, rate=3.0, seed=5)
    b = make_workload(kind, 300, rate=3.0, seed=6)
    assert [r.prompt_tokens for r in a] != [r.prompt_tokens for r in b]
    assert [r.request_id for r in a] == list(range(300))
    times = [r.arrival_s for r in a]
    assert times == sorted(times)
    for r in a:
        assert len(r.prompt_tokens) == r.prompt_len and len(r.output_tokens) == r.output_len
        assert r.total_len <= 2048
        assert all(type(t) is int and 3 <= t < 32000 for t in r.prompt_tokens + r.output_tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_small_vocabulary_and_cap(kind: str) -> None:
    reqs = make_workload(
        kind,
        200,
        rate=None,
        arrival="burst",
        seed=1,
        max_model_len=600,
        vocab_size=10,
        system_prompt_len=256,
        doc_len=256,
        template_len=256,
    )
    assert all(r.total_len <= 600 for r in reqs)
    assert {t for r in reqs for t in r.prompt_tokens + r.output_tokens} <= set(range(3, 10))


@pytest.mark.parametrize("kind", ("system-prompt", "rag", "few-shot"))
def test_arrival_process_does_not_change_tokens(kind: str) -> None:
    """Arrivals are drawn last, so swapping the process keeps every prompt and output."""
    base = make_workload(kind, 100, rate=2.0, seed=3)
    other = make_workload(kind, 100, rate=None, arrival="burst", seed=3)
    assert [(r.prompt_tokens, r.output_tokens) for r in base] == [
        (r.prompt_tokens, r.output_tokens) for r in other
    ]
    assert all(r.arrival_s == 0.0 for r in other)


def test_system_prompt_is_shared_and_user_parts_differ() -> None:
    reqs = system_prompt(500, rate=5.0, seed=0)
    system = reqs[0].prompt_tokens[:1024]
    assert all(r.prompt_tokens[:1024] == system for r in reqs)
    assert all(r.prompt_len >= 1025 for r in reqs)  # at least one user token each
    users = [r.prompt_tokens[1024:] for r in reqs]
    assert len(set(users)) == 500
    assert len({r.output_tokens for r in reqs}) == 500


def test_several_system_prompts_chosen_uniformly() -> None:
    reqs = system_prompt(3000, rate=5.0, seed=2, num_system_prompts=3, system_prompt_len=64)
    counts = Counter(r.prompt_tokens[:64] for r in reqs)
    assert len(counts) == 3
    assert all(abs(c / 3000 - 1 / 3) < 0.03 for c in counts.values())  # sd ~0.009


def test_system_prompt_bound_is_shared_share_of_prompt() -> None:
    """After the first request every prompt hits its 1024-token system prompt (64 blocks) and
    nothing else: bound = (N - 1) * 1024 / total prompt tokens ~ 1024 / (1024 + 161.31)."""
    reqs = system_prompt(2000, rate=5.0, seed=0)
    total = sum(r.prompt_len for r in reqs)
    assert prefix_sharing_bound(reqs, 16) == pytest.approx(1999 * 1024 / total, rel=1e-12)
    assert prefix_sharing_bound(reqs, 16) == pytest.approx(1024 / (1024 + 161.31), rel=0.02)
    # blocks of 1000 tokens: only block 1 (tokens 0..999) is entirely system prompt
    assert prefix_sharing_bound(reqs, 1000) == pytest.approx(1999 * 1000 / total, rel=1e-12)


def test_rag_popularity_is_zipf() -> None:
    n, s = 5000, 1.1
    reqs = rag(n, rate=10.0, seed=0, num_documents=200, doc_len=64, zipf_s=s)
    counts = Counter(r.prompt_tokens[:64] for r in reqs).most_common()
    h = _harmonic(200, s)  # ~4.76: top document ~21%, sd ~0.6% over 5,000 requests
    assert counts[0][1] / n == pytest.approx(1 / h, abs=0.02)
    assert counts[1][1] / n == pytest.approx(2**-s / h, abs=0.015)
    assert len(counts) <= 200


def test_rag_documents_distinct_within_request_and_stored_once() -> None:
    reqs = rag(
        300,
        rate=None,
        arrival="burst",
        seed=4,
        num_documents=3,
        doc_len=64,
        docs_per_request=3,
        max_model_len=1024,
    )
    docs = set()
    for r in reqs:
        chunks = [r.prompt_tokens[i * 64 : (i + 1) * 64] for i in range(3)]
        assert len(set(chunks)) == 3
        docs.update(chunks)
    assert len(docs) == 3
    orders = {
        tuple(
            sorted(docs).index(c)
            for c in (r.prompt_tokens[:64], r.prompt_tokens[64:128], r.prompt_tokens[128:192])
        )
        for r in reqs
    }
    assert len(orders) > 1  # draw order, not a fixed order


def test_rag_lognormal_documents_still_share() -> None:
    reqs = rag(1000, rate=5.0, seed=0, num_documents=50, doc_len=512, doc_sigma=0.5)
    assert len({r.prompt_len for r in reqs}) > 100
    assert prefix_sharing_bound(reqs, 16) > 0.7


def test_few_shot_templates_reused_with_zipf() -> None:
    reqs = few_shot(2000, rate=5.0, seed=0)
    counts = Counter(r.prompt_tokens[:512] for r in reqs).most_common()
    assert len(counts) == 8
    assert counts[0][1] / 2000 == pytest.approx(1 / _harmonic(8, 1.1), abs=0.04)  # 0.398, sd 0.011
    queries = [r.prompt_tokens[512:] for r in reqs]
    assert len(set(queries)) == 2000
    assert sum(r.output_len for r in reqs) / 2000 == pytest.approx(32, rel=0.15)


def test_chat_turns_repeat_the_whole_conversation() -> None:
    reqs = chat(600, rate=0.5, seed=0)
    sessions = _sessions(reqs)
    assert list(sessions) == [
        f"s{k}" for k in range(len(sessions))
    ]  # Poisson starts: s0, s1, ... in order
    for turns in sessions.values():
        for prev, cur in zip(turns, turns[1:]):
            history = prev.prompt_tokens + prev.output_tokens
            assert cur.prompt_tokens[: len(history)] == history
            assert cur.prompt_len > len(history)  # plus a new user message
            assert cur.arrival_s >= prev.arrival_s + prev.output_len * 0.02
    assert len(reqs) == 600


def test_chat_without_think_time_waits_for_generation_only() -> None:
    reqs = chat(200, rate=1.0, seed=1, think_time=0.0)
    for turns in _sessions(reqs).values():
        for prev, cur in zip(turns, turns[1:]):
            assert cur.arrival_s - prev.arrival_s == pytest.approx(
                prev.output_len * 0.02, rel=1e-9, abs=1e-9
            )


def test_chat_turns_per_session_mean_and_burst_starts() -> None:
    reqs = chat(5000, rate=None, arrival="burst", seed=0, max_model_len=100_000)
    sessions = _sessions(reqs)
    lengths = [len(t) for t in sessions.values()][:-1]  # the last session is cut at num_requests
    assert sum(lengths) / len(lengths) == pytest.approx(5.0, abs=0.5)  # geometric: sd of mean ~0.14
    first = [r for r in reqs if r.arrival_s == 0.0]
    assert [r.session_id for r in first] == [f"s{k}" for k in range(len(sessions))]
    assert [r.request_id for r in first] == list(range(len(sessions)))
    lognormal = chat(3000, rate=1.0, seed=0, max_model_len=100_000, turns_dist="lognormal")
    lengths = [len(t) for t in _sessions(lognormal).values()][:-1]
    assert sum(lengths) / len(lengths) == pytest.approx(5.0, rel=0.2)


def test_chat_stops_at_max_model_len() -> None:
    reqs = chat(1000, rate=1.0, seed=2, max_model_len=512, turns_per_session=20)
    assert all(r.total_len <= 512 for r in reqs)
    assert len(_sessions(reqs)) > 1000 / 20 * 1.5  # conversations end early when the context fills


def test_chat_bound_is_previous_turn_history() -> None:
    """Only a session's own history can hit: turn k+1 hits floor(len(history) / B) blocks,
    capped at floor((prompt_len - 1) / B); first turns hit nothing."""
    reqs, block = chat(800, rate=0.5, seed=3), 16
    hits = 0
    for turns in _sessions(reqs).values():
        for prev, cur in zip(turns, turns[1:]):
            hits += block * min(
                (prev.prompt_len + prev.output_len) // block, (cur.prompt_len - 1) // block
            )
    assert prefix_sharing_bound(reqs, block) == hits / sum(r.prompt_len for r in reqs)


def test_prefix_sharing_bound_tiny_exact() -> None:
    def req(i: int, prompt: tuple[int, ...], output: tuple[int, ...] | None = None) -> Request:
        return Request(
            request_id=i,
            arrival_s=float(i),
            prompt_len=len(prompt),
            output_len=len(output or (9,)),
            prompt_tokens=prompt,
            output_tokens=output,
        )

    reqs = [
        req(0, (1, 2, 3, 4, 5), (6, 7)),  # caches blocks [1,2] [3,4] [5,6]; hits 0
        req(1, (1, 2, 3, 4, 9)),  # [1,2] [3,4] hit: 4 tokens
        req(2, (1, 2, 3, 4)),  # fully cached, last block recomputed: floor(3/2) = 1 block, 2 tokens
        req(3, (3, 4, 1, 2)),  # [3,4] first has another parent: 0
        req(4, (1, 2, 3, 4, 5, 6, 8)),  # [5,6] came from request 0's output: 3 blocks, 6 tokens
    ]
    assert prefix_sharing_bound(reqs, 2) == 12 / 25
    length_only = Request(request_id=5, arrival_s=5.0, prompt_len=5, output_len=1)
    assert prefix_sharing_bound(reqs + [length_only], 2) == 12 / 30
    assert prefix_sharing_bound(list(reversed(reqs)), 2) == 12 / 25  # sorted by arrival first
    assert (
        prefix_sharing_bound(reqs, 4) == 8 / 25
    )  # [1,2,3,4] hits for requests 1 and 4 (2: limit 0)
    assert prefix_sharing_bound([], 16) == 0.0


def test_dispatcher_passes_parameters() -> None:
    assert make_workload(
        "rag", 50, rate=2.0, seed=3, num_documents=10, doc_len=32, docs_per_request=2, zipf_s=0.5
    ) == rag(50, rate=2.0, seed=3, num_documents=10, doc_len=32, docs_per_request=2, zipf_s=0.5)
    assert make_workload("chat", 50, rate=2.0, seed=3, turns_per_session=3, think_time=1.0) == chat(
        50, rate=2.0, seed=3, turns_per_session=3, think_time=1.0
    )
    assert make_workload("few-shot", 50, rate=2.0, num_templates=2, template_len=100) == few_shot(
        50, rate=2.0, num_templates=2, template_len=100
    )
    assert make_workload(
        "system-prompt", 50, rate=2.0, system_prompt_len=10, num_system_prompts=2
    ) == system_prompt(50, rate=2.0, system_prompt_len=10, num_system_prompts=2)


def test_generation_is_fast() -> None:
    import time

    start = time.perf_counter()
    reqs = rag(10_000, rate=10.0, seed=0)
    assert time.perf_counter() - start < 5.0  # ~0.5 s here; generous for slow CI machines
    assert len(reqs) == 10_000


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: system_prompt(10, rate=1.0, system_prompt_len=2047), "raise max_model_len"),
        (lambda: system_prompt(10, rate=1.0, num_system_prompts=0), "num_system_prompts"),
        (lambda: rag(10, rate=1.0, num_documents=2, docs_per_request=3), "lower docs_per_request"),
        (lambda: rag(10, rate=1.0, docs_per_request=2), "raise max_model_len"),
        (lambda: rag(10, rate=1.0, zipf_s=-1.0), "zipf_s"),
        (lambda: rag(10, rate=1.0, doc_len=0), "doc_len"),
        (lambda: chat(10, rate=1.0, turns_per_session=0.5), "turns_per_session"),
        (lambda: chat(10, rate=1.0, turns_dist="poisson"), "turns_dist"),
        (lambda: chat(10, rate=1.0, think_time=-1.0), "think_time"),
        (lambda: chat(10, rate=1.0, output_mean=0.0), "output mean"),
        (lambda: few_shot(10, rate=1.0, num_templates=0), "num_templates"),
        (lambda: few_shot(10, rate=1.0, template_len=4000), "shorten template_len"),
        (lambda: few_shot(10, rate=1.0, vocab_size=3), "vocab_size"),
        (lambda: make_workload("chat", 10, rate=None), "rate"),
        (lambda: make_workload("rag", 0, rate=1.0), "num_requests"),
        (lambda: make_workload("prefix", 10, rate=1.0), "system-prompt, rag, chat, few-shot"),
    ],
)
def test_bad_parameters_raise_one_line(call, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def prefix_sharing_bound(requests: list[Request], block_size: int) -> float:
    """The engine's infinite-cache bound as a share of prompt tokens."""
    hits, queried = infinite_cache_hit_tokens(requests, block_size)
    return hits / queried if queried else 0.0
