"""Small public inputs shipped inside kvplan, so every README example runs on a fresh clone
or from a plain wheel: the stories260K checkpoint, its tokenizer and a TinyStories text for
real mode and quality, excerpts of a Mooncake trace and of a ShareGPT length-stats CSV for
bench, one vLLM startup log for `kvplan explain` and one `vllm bench serve --save-result`
JSON for `kvplan calibrate`. SOURCES.md beside these files names each one's source and
licence; LICENSES/ holds the licence texts. Every file is an excerpt or a verbatim copy of
published data, never something kvplan generated.

This module only locates them (importlib.resources, so an installed wheel and a source
tree read the same files); `kvplan samples` renders the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    """One shipped input: `path` is relative to this package (a folder for a checkpoint)."""

    name: str
    path: str
    what: str
    licence: str
    source: str


SAMPLES: tuple[Sample, ...] = (
    Sample(
        "stories260k",
        "stories260K/hf",
        "stories260K (Llama, 260K parameters) as a transformers folder: --model-path",
        "MIT",
        "karpathy/llama2.c stories260K (Hugging Face karpathy/tinyllamas), converted",
    ),
    Sample(
        "stories260k-tokenizer",
        "stories260K/tok512.bin",
        "stories260K's llama2.c tokenizer (512 tokens): --tokenizer",
        "MIT",
        "karpathy/tinyllamas stories260K/tok512.bin",
    ),
    Sample(
        "tinystories-text",
        "stories260K/tinystories_validation_0.txt",
        "TinyStories validation story 0: --quality-text",
        "CDLA-Sharing-1.0",
        "roneneldan/TinyStories (Hugging Face), validation split",
    ),
    Sample(
        "mooncake-trace",
        "traces/mooncake_synthetic_head200.jsonl",
        "first 200 requests (58.5 s) of Mooncake's synthetic trace: --trace",
        "Apache-2.0",
        "kvcache-ai/Mooncake FAST25-release/traces/synthetic_trace.jsonl",
    ),
    Sample(
        "sharegpt-stats",
        "traces/sharegpt_stats_head500.csv",
        "first 500 rows of sarathi-serve's ShareGPT length stats: --stats-path",
        "Apache-2.0",
        "microsoft/sarathi-serve data/processed_traces/",
    ),
    Sample(
        "vllm-startup-log",
        "serving/vllm-0.10.1.1-qwen2-7b-a100-80gb.log",
        "vLLM 0.10.1.1 (V1) startup log, Qwen2-7B-Instruct on one A100 80GB: kvplan explain",
        "none stated",
        "dennislee22/vLLM-benchmarking log/vllm-7B-1gpuA10080GB-0.25GRAM.log",
    ),
    Sample(
        "vllm-bench-result",
        "serving/vllm-bench-serve-qwen3-14b-h100.json",
        "vllm bench serve --save-result JSON, Qwen3-14B on one H100 (vLLM 0.11.0): "
        "kvplan calibrate",
        "Apache-2.0",
        "gpustack/gpustack docs/performance-lab/qwen3-14b/h100.md",
    ),
)


def sample_names() -> list[str]:
    return [sample.name for sample in SAMPLES]


def find_sample(name: str) -> Sample:
    """The sample called `name`; a ValueError listing the names for any other word."""
    for sample in SAMPLES:
        if sample.name == name:
            return sample
    raise ValueError(f"no sample named '{name}'; the samples are {', '.join(sample_names())}")


def samples_dir() -> Path:
    """This package's folder: the files sit beside this module in a source tree and in a wheel."""
    return Path(str(resources.files(__name__)))


def sample_path(name: str) -> Path:
    """Absolute path of a shipped sample (a folder for the checkpoint)."""
    return samples_dir() / find_sample(name).path


def sample_files(sample: Sample) -> list[Path]:
    """The files a sample consists of: itself, or every file in its folder."""
    path = samples_dir() / sample.path
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def sample_bytes(sample: Sample) -> int:
    return sum(path.stat().st_size for path in sample_files(sample))
