"""How many token slots a sequence holds under its policy, step by step: the memory model
the simulator charges and the real engine's block tables follow (a closed-loop test pins
the two together). Each function asks the spec's policy object (base.py says what each
count means; the policies' modules say how each one holds its tokens)."""

from __future__ import annotations

from kvplan.core.policies.spec import PolicySpec


def held_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """Tokens each head holds once the step that wrote token `length` is done."""
    return spec.policy.held_tokens(spec, prompt_len, length)


def used_tokens(spec: PolicySpec, prompt_len: int, length: int) -> float:
    """Token states the sequence's held slots carry, per slot of every layer."""
    return spec.policy.used_tokens(spec, prompt_len, length)


def attended_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """Tokens the step writing token `length` attends to."""
    return spec.policy.attended_tokens(spec, prompt_len, length)


def held_blocks(spec: PolicySpec, prompt_len: int, length: int, block_size: int) -> int:
    """Pool blocks the sequence holds after writing token `length`."""
    return spec.policy.held_blocks(spec, prompt_len, length, block_size)


def peak_held_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """The most tokens held at any point while writing `length` tokens one by one."""
    return spec.policy.peak_held_tokens(spec, prompt_len, length)
