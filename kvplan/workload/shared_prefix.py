"""Workloads whose prompts share prefixes, carrying real token ids so prefix caching can find them.

Why: the length-only generators in synthetic.py never share a prefix, so they cannot show what
automatic prefix caching buys. The engine's prefix cache (like vLLM's) hashes *full blocks of
token ids*, each chained to its parent block, so sharing exists exactly where two token
sequences agree from the first token on. These generators therefore build prompts from actual
ids: a pool of shared prefixes drawn once, plus per-request unique parts.

- ``system-prompt``: one of ``num_system_prompts`` system prompts (uniform) of
  ``system_prompt_len`` tokens + a ShareGPT-like user message (lognormal mean 161.31, sigma
  1.63) -> output lognormal mean 337.99 (sigma 1.0), the vLLM paper's ShareGPT means.
- ``rag``: a corpus of ``num_documents`` documents of ``doc_len`` tokens (lognormal with
  ``doc_sigma`` > 0); popularity Zipf(``zipf_s``): P(rank r) = r^-s / H(N, s). A request is
  ``docs_per_request`` distinct documents in draw order + a question (mean 64) -> output mean 128.
- ``chat``: sessions start as the arrival process at ``rate`` sessions/s; turns per session
  geometric (or lognormal) with mean ``turns_per_session``. Each turn's prompt is the whole
  conversation so far (earlier user messages and the earlier turns' ``output_tokens``) + a new
  user message (mean 64) -> output mean 200. The next turn arrives an exponential think time
  (mean ``think_time`` s) after the previous turn's arrival plus its estimated generation time
  (output_len * ``decode_s_per_token``). A session stops when its next prompt would leave no
  room for one output token. ``num_requests`` counts turns; the last session is cut short.
- ``few-shot``: ``num_templates`` templates of ``template_len`` tokens with Zipf popularity
  + a unique query (mean 48) -> output mean 32.

Token ids are uniform in [3, vocab_size) (0..2 left for BOS/EOS/PAD): random ids from a 32k
vocabulary repeat a 16-token block by chance with negligible probability, so every cache hit is
a designed one. Every id is one shared Python int per vocabulary entry and prefixes are stored
once, so a prompt costs one tuple slot (8 bytes) per token.

Lengths follow synthetic.py: lognormals whose mean is kept after capping (``solve_mu``), then
prompt + output <= max_model_len by shortening the output first, then the prompt's tail.
Determinism: one ``default_rng(seed)``; prefixes and their choice, then lengths, then tokens,
then arrivals last, so changing only the arrival process keeps every prompt.
"""

from __future__ import annotations

import numpy as np

from kvplan.workload.arrivals import arrival_times
from kvplan.workload.lengths import SHAREGPT, solve_mu
from kvplan.workload.prefix_checks import check_common, check_int, check_real, check_stored
from kvplan.workload.prompt_draws import (
    TokenDrawer,
    choose_distinct,
    lognormal_lengths,
    prefixed_requests,
    zipf_probabilities,
)
from kvplan.workload.request import Request

SHARED_PREFIX_KINDS: tuple[str, ...] = ("system-prompt", "rag", "chat", "few-shot")
TURN_DISTRIBUTIONS: tuple[str, ...] = ("geometric", "lognormal")


# --- generators ------------------------------------------------------------------------


def system_prompt(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    system_prompt_len: int = 1024,
    num_system_prompts: int = 1,
    user_mean: float = SHAREGPT.prompt_mean,
    user_sigma: float = SHAREGPT.prompt_sigma,
    output_mean: float = SHAREGPT.output_mean,
    output_sigma: float = SHAREGPT.output_sigma,
    vocab_size: int = 32000,
) -> list[Request]:
    """A shared system prompt (one of `num_system_prompts`, uniform) + a ShareGPT-like user turn."""
    check_common(
        num_requests,
        arrival,
        rate,
        cv,
        max_model_len,
        vocab_size,
        (user_mean, user_sigma),
        (output_mean, output_sigma),
    )
    check_int(
        "system_prompt_len", system_prompt_len, 1, "pass the system prompt's length in tokens"
    )
    if system_prompt_len > max_model_len - 2:
        raise ValueError(
            f"system_prompt_len {system_prompt_len} leaves no room for a user token and an output "
            f"token in max_model_len {max_model_len}; raise max_model_len or shorten the prompt"
        )
    check_int("num_system_prompts", num_system_prompts, 1, "use 1 for one shared system prompt")
    check_stored("num_system_prompts", num_system_prompts, "system_prompt_len", system_prompt_len)
    rng = np.random.default_rng(seed)
    tokens = TokenDrawer(rng, vocab_size)
    prefixes = tokens.draw([system_prompt_len] * num_system_prompts)
    choice = rng.integers(0, num_system_prompts, (num_requests, 1))
    return prefixed_requests(
        rng,
        tokens,
        prefixes,
        choice,
        (user_mean, user_sigma),
        (output_mean, output_sigma),
        rate=rate,
        arrival=arrival,
        cv=cv,
        max_model_len=max_model_len,
    )


def rag(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    num_documents: int = 200,
    doc_len: int = 1024,
    doc_sigma: float = 0.0,
    zipf_s: float = 1.1,
    docs_per_request: int = 1,
    question_mean: float = 64.0,
    question_sigma: float = 1.0,
    output_mean: float = 128.0,
    output_sigma: float = 1.0,
    vocab_size: int = 32000,
) -> list[Request]:
    """Retrieval-augmented prompts: Zipf-popular documents (stored once) + a unique question.

    doc_sigma = 0 gives every document exactly doc_len tokens; > 0 draws lognormal lengths with
    mean doc_len. Documents keep their draw order in the prompt (retrieval order), so the same
    pair in the other order shares only its first document.
    """
    check_common(
        num_requests,
        arrival,
        rate,
        cv,
        max_model_len,
        vocab_size,
        (question_mean, question_sigma),
        (output_mean, output_sigma),
    )
    check_int("num_documents", num_documents, 1, "use at least one document")
    check_int("doc_len", doc_len, 1, "pass the document length in tokens")
    check_real("doc_sigma", doc_sigma, "use 0 for fixed-length documents", allow_low=True)
    check_real("zipf_s", zipf_s, "use 0 for uniform popularity, ~1 for Zipf", allow_low=True)
    check_int("docs_per_request", docs_per_request, 1, "use at least one document per request")
    if docs_per_request > num_documents:
        raise ValueError(
            f"docs_per_request {docs_per_request} exceeds num_documents {num_documents}; "
            "documents are distinct within a request, so lower docs_per_request"
        )
    # the corpus is stored once; each request's choice is a row of docs_per_request ids
    check_stored("num_documents", num_documents, "doc_len", min(doc_len, max_model_len))
    check_stored(
        "num_requests", num_requests, "docs_per_request", docs_per_request, "document choices"
    )
    if doc_sigma == 0 and docs_per_request * doc_len > max_model_len - 2:
        raise ValueError(
            f"{docs_per_request} documents of {doc_len} tokens leave no room for a question and an "
            f"output token in max_model_len {max_model_len}; raise max_model_len or shorten doc_len"
        )
    rng = np.random.default_rng(seed)
    tokens = TokenDrawer(rng, vocab_size)
    lengths = (
        np.full(num_documents, doc_len)
        if doc_sigma == 0
        else lognormal_lengths(
            rng, solve_mu(doc_len, doc_sigma, None), doc_sigma, num_documents, max_model_len - 2
        )
    )
    corpus = tokens.draw(lengths)
    choice = choose_distinct(
        rng, zipf_probabilities(num_documents, zipf_s), num_requests, docs_per_request
    )
    return prefixed_requests(
        rng,
        tokens,
        corpus,
        choice,
        (question_mean, question_sigma),
        (output_mean, output_sigma),
        rate=rate,
        arrival=arrival,
        cv=cv,
        max_model_len=max_model_len,
    )


def few_shot(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    num_templates: int = 8,
    template_len: int = 512,
    zipf_s: float = 1.1,
    query_mean: float = 48.0,
    query_sigma: float = 1.0,
    output_mean: float = 32.0,
    output_sigma: float = 1.0,
    vocab_size: int = 32000,
) -> list[Request]:
    """Few-shot prompting: one of `num_templates` example blocks (Zipf popular) + a unique query."""
    check_common(
        num_requests,
        arrival,
        rate,
        cv,
        max_model_len,
        vocab_size,
        (query_mean, query_sigma),
        (output_mean, output_sigma),
    )
    check_int("num_templates", num_templates, 1, "use at least one template")
    check_int("template_len", template_len, 1, "pass the template length in tokens")
    check_real("zipf_s", zipf_s, "use 0 for uniform popularity, ~1 for Zipf", allow_low=True)
    if template_len > max_model_len - 2:
        raise ValueError(
            f"template_len {template_len} leaves no room for a query and an output token in "
            f"max_model_len {max_model_len}; raise max_model_len or shorten template_len"
        )
    check_stored("num_templates", num_templates, "template_len", template_len)
    rng = np.random.default_rng(seed)
    tokens = TokenDrawer(rng, vocab_size)
    templates = tokens.draw([template_len] * num_templates)
    choice = choose_distinct(rng, zipf_probabilities(num_templates, zipf_s), num_requests, 1)
    return prefixed_requests(
        rng,
        tokens,
        templates,
        choice,
        (query_mean, query_sigma),
        (output_mean, output_sigma),
        rate=rate,
        arrival=arrival,
        cv=cv,
        max_model_len=max_model_len,
    )


def chat(
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    turns_per_session: float = 5.0,
    turns_dist: str = "geometric",
    turns_sigma: float = 1.0,
    think_time: float = 10.0,
    user_mean: float = 64.0,
    user_sigma: float = 1.0,
    output_mean: float = 200.0,
    output_sigma: float = 1.0,
    decode_s_per_token: float = 0.02,
    vocab_size: int = 32000,
) -> list[Request]:
    """Multi-turn sessions whose every prompt repeats the whole conversation so far.

    `rate` is session starts per second; `num_requests` counts turns. Sorted by arrival
    (ties: session, then turn) with ids 0..num_requests-1; session_id is f"s{k}", k in start order.
    """
    check_common(
        num_requests,
        arrival,
        rate,
        cv,
        max_model_len,
        vocab_size,
        (user_mean, user_sigma),
        (output_mean, output_sigma),
    )
    check_real(
        "turns_per_session",
        turns_per_session,
        "use 1 for single-turn sessions",
        low=1.0,
        allow_low=True,
    )
    if turns_dist not in TURN_DISTRIBUTIONS:
        raise ValueError(
            f"unknown turns_dist {turns_dist!r}; use one of {', '.join(TURN_DISTRIBUTIONS)}"
        )
    check_real("turns_sigma", turns_sigma, "use e.g. 1.0", allow_low=True)
    check_real(
        "think_time", think_time, "pass the mean seconds between turns, e.g. 10", allow_low=True
    )
    check_real(
        "decode_s_per_token", decode_s_per_token, "e.g. 0.02 s per output token", allow_low=True
    )
    rng = np.random.default_rng(seed)
    tokens = TokenDrawer(rng, vocab_size)
    n, cap = num_requests, max_model_len - 1
    # Lengths first, as flat streams: at most n sessions, and each session consumes its turns
    # plus at most one turn that did not fit, so 2n entries always suffice.
    planned = (
        rng.geometric(1.0 / turns_per_session, n)
        if turns_dist == "geometric"
        else lognormal_lengths(
            rng, solve_mu(turns_per_session, turns_sigma, None), turns_sigma, n, n
        )
    )
    user_len = lognormal_lengths(
        rng, solve_mu(user_mean, user_sigma, cap), user_sigma, 2 * n, cap
    ).tolist()
    drawn_output = lognormal_lengths(
        rng, solve_mu(output_mean, output_sigma, cap), output_sigma, 2 * n, cap
    ).tolist()
    sessions: list[list[tuple[int, int]]] = []  # per session: (user length, output length) per turn
    pos, remaining = 0, n
    for turns in planned.tolist():
        if remaining == 0:
            break
        context = 0
        session: list[tuple[int, int]] = []
        while len(session) < min(turns, remaining):
            prompt = context + user_len[pos]
            pos += 1
            if prompt > cap:  # no room left for one output token: the conversation ends
                break
            output = min(drawn_output[pos - 1], max_model_len - prompt)
            session.append((user_len[pos - 1], output))
            context = prompt + output
        sessions.append(session)
        remaining -= len(session)
    flat = [turn for session in sessions for turn in session]
    users = tokens.draw([user for user, _ in flat])
    outputs = tokens.draw([output for _, output in flat])
    starts = arrival_times(rng, len(sessions), arrival, rate, cv)
    think = rng.exponential(think_time, n).tolist() if think_time > 0 else [0.0] * n
    # (arrival, session, turn, prompt, output)
    rows: list[tuple[float, int, int, tuple[int, ...], tuple[int, ...]]] = []
    for k, (start, turns_of) in enumerate(zip(starts.tolist(), sessions)):
        t = start
        history: tuple[int, ...] = ()
        for turn in range(len(turns_of)):
            i = len(rows)
            if turn:
                t += len(outputs[i - 1]) * decode_s_per_token + think[i]
            prompt = history + users[i]
            rows.append((t, k, turn, prompt, outputs[i]))
            history = prompt + outputs[i]
    rows.sort(key=lambda row: row[:3])
    return [
        Request(
            request_id=i,
            arrival_s=t,
            prompt_len=len(prompt),
            output_len=len(output),
            prompt_tokens=prompt,
            output_tokens=output,
            session_id=f"s{k}",
        )
        for i, (t, k, _, prompt, output) in enumerate(rows)
    ]


# --- analysis --------------------------------------------------------------------------
