"""Greedy generation through kvplan's paged KV and kernels (RealRunner) and through
transformers' own generate, and the comparison of the two (test_real_mode.py; its Triton
comparison imports this in a fresh interpreter).

Imports torch and kvplan.real: a test module imports this after its torch and transformers
checks.
"""

from __future__ import annotations

import torch
from kvplan.kernels.quant import allocate_kv_cache

from kvplan.core.engine import Engine
from kvplan.core.kv import make_allocator
from kvplan.core.scheduler import SchedulerConfig
from kvplan.real.runner import RealRunner
from kvplan.workload.request import Request


def kvplan_generate(
    model,
    prompts: list[tuple[int, ...]],
    new_tokens: int,
    blocks: int = 64,
    block: int = 16,
    backend: str = "torch",
    kv: str = "fp32",
) -> RealRunner:
    config = model.config
    heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    pool = [
        allocate_kv_cache(kv, blocks, block, heads, head_dim, dtype=torch.float32)
        for _ in range(config.num_hidden_layers)
    ]
    real = RealRunner(model, pool, block, config.vocab_size, "cpu", backend=backend)
    real.keep_logits = True
    allocator = make_allocator("paged", blocks * block, block, 512, watermark=0.0)
    requests = [Request(i, 0.0, len(p), new_tokens, prompt_tokens=p) for i, p in enumerate(prompts)]
    Engine(allocator, real, SchedulerConfig(), 512).run(requests)
    return real


def hf_greedy(reference, prompt: tuple[int, ...], new_tokens: int):
    out = reference.generate(
        torch.tensor([prompt]),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
    )
    return out.sequences[0, len(prompt) :].tolist(), torch.stack(out.logits)[:, 0]


def compare_with_transformers(model, reference, backend: str, steps: int, block: int) -> None:
    prompts = [(1,), (1, 403, 407, 261, 378, 263, 127)]
    real = kvplan_generate(model, prompts, steps, block=block, backend=backend)
    for index, prompt in enumerate(prompts):
        tokens, logits = hf_greedy(reference, prompt, steps)
        assert real.tokens[(index, 0)][len(prompt) :] == tokens
        ours = torch.stack(real.step_logits[(index, 0)])
        assert torch.allclose(ours, logits, atol=1e-4, rtol=1e-4), (ours - logits).abs().max()
