"""What `vllm bench serve` is told: dataset, lengths, how many, how fast, with vLLM's
client's own defaults. No numpy: `kvplan bench`'s options read these defaults for their
help, and kvplan.workload.vllm_bench makes the requests."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.spec.setting_error import SettingError


@dataclass(frozen=True)
class BenchLoad:
    """What `vllm bench serve` was told: dataset, lengths, how many, how fast."""

    dataset: str = "random"  # random or sharegpt
    num_prompts: int = 1000
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    # vLLM's benchmark before 0.8.4 read the ratio as a floor: lengths in [len x r, len], its
    # default 1.0 meaning fixed; from 0.8.4, [len x (1 - r), len x (1 + r)], default 0.0
    range_below: bool = False
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in ("random", "sharegpt"):
            raise ValueError(f"unknown benchmark dataset '{self.dataset}'; use random or sharegpt")
        if self.num_prompts < 1:
            raise SettingError("{num_prompts} must be at least 1, got {got}", got=self.num_prompts)
        if self.input_len < 1 or self.output_len < 1:
            raise SettingError("{input_len} and {output_len} must be at least 1")
        if self.range_below and not 0.0 <= self.range_ratio <= 1.0:
            raise SettingError(
                "{range_ratio} must be in [0, 1] (vLLM before 0.8.4), got {got}",
                got=self.range_ratio,
            )
        if not self.range_below and not 0.0 <= self.range_ratio < 1.0:
            raise SettingError(
                "{range_ratio} must be in [0, 1) (vLLM 0.8.4 and later; before it 1.0 meant "
                "fixed lengths: give {engine_version}), got {got}",
                got=self.range_ratio,
            )
        if not self.request_rate > 0:
            raise SettingError(
                "{request_rate} must be positive or inf, got {got}", got=self.request_rate
            )
        if not self.burstiness > 0:
            raise SettingError("{burstiness} must be positive, got {got}", got=self.burstiness)
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise SettingError(
                "{max_concurrency} must be at least 1, got {got}", got=self.max_concurrency
            )


def random_length_bounds(
    input_len: int, output_len: int, range_ratio: float, below: bool = False
) -> tuple[tuple[int, int], tuple[int, int]]:
    """vLLM RandomDataset's integer ranges (lowest, highest) of input and output lengths around
    the requested means: [L(1 - r), L(1 + r)], or (below: its benchmark before 0.8.4) from
    L x r up to L; an output at least 1 token. The draws (kvplan.workload.vllm_bench) and the
    longest request a stream can send (the default max_model_len that admits it) read these."""
    if below:
        inputs = int(input_len * range_ratio), input_len
        outputs = max(int(output_len * range_ratio), 1), output_len
    else:
        inputs = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
        outputs = (
            max(math.floor(output_len * (1 - range_ratio)), 1),
            max(math.ceil(output_len * (1 + range_ratio)), 1),
        )
    return inputs, outputs
