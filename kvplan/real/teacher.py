"""Quality through the serving engine: a text teacher-forced through the same scheduler,
paged block pool, eviction policy and kernels that serve, so a quality figure and a
serving figure describe the same code (the quality evaluator, kvplan/quality/evaluate.py,
is a contiguous per-head cache fed token by token).

The text is one request: its first `prompt_len` tokens the prompt (read in prefill
chunks), the rest fed one per step as if generated, the next token always the text's
(runner.forced). Every position's logits are kept. SnapKV reads its prompt first (the
evaluator's half of the text); the other policies get a one-token prompt so every later
token is a decode step, strict at the budget, as the evaluator's are.
"""

from __future__ import annotations

from typing import Any

from kvplan.workload.request import Request


def served_prompt_len(policy: str | None, count: int) -> int:
    from kvplan.core.policies.registry import lookup

    return count // 2 if policy and lookup(policy).selects_after_prompt else 1


def served_logits(factory: Any, optimization: Any, tokens: list[int]) -> Any:
    """Logits [len(tokens) - 1, vocab] predicting tokens[1:], through a fresh engine."""
    import torch

    engine, _ = factory.build(optimization)
    prompt = served_prompt_len(optimization.policy, len(tokens))
    engine.runner.forced[(0, 0)] = list(tokens)
    engine.run(
        [Request(0, 0.0, prompt, len(tokens) - prompt, prompt_tokens=tuple(tokens[:prompt]))]
    )
    rows = engine.runner.step_logits[(0, 0)]
    if len(rows) != len(tokens) - 1:
        raise RuntimeError(
            f"the engine returned {len(rows)} positions for a {len(tokens)}-token text"
        )
    return torch.stack(rows)


def served_quality(
    factory: Any, optimization: Any, tokens: list[int], reference: Any | None = None
) -> dict[str, float]:
    """Perplexity of the text and mean KL(reference || served) through the serving engine;
    `reference`: the full cache's served logits."""
    import math

    import torch

    logits = served_logits(factory, optimization, tokens)
    nll = torch.nn.functional.cross_entropy(
        logits, torch.tensor(tokens[1:], device=logits.device)
    ).item()
    out = {"served_perplexity": math.exp(nll)}
    if reference is not None:
        out["served_kl_mean"] = torch.nn.functional.kl_div(
            logits.log_softmax(-1),
            reference.log_softmax(-1),
            log_target=True,
            reduction="batchmean",
        ).item()
    return out
