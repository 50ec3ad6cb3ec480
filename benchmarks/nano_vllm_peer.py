"""nano-vllm's block manager as a peer for engine_speed.py: the same prompts, one at a time,
through its can_allocate / allocate / hash_blocks / deallocate, timed beside kvplan.

nano-vllm is not a dependency. Its three pure-Python files (sampling_params.py,
engine/sequence.py, engine/block_manager.py) are loaded from a checkout without running its
package __init__ (which imports torch and flash-attn): from --nano-vllm DIR, $NANO_VLLM_DIR,
or a shallow clone made at run time into ~/.cache/kvplan/nano-vllm when git and the network
are there. Its block manager hashes token ids with xxhash (`pip install xxhash`). Without
either, the peer is skipped with a message.

Trace requests carry Mooncake's 512-token block ids, not tokens; the peer's prompt gives
position j of trace block k the token id ids[k] * 512 + j % 512, so equal ids mean equal
tokens and nano-vllm's content hashes share exactly what kvplan's id hashes share (the hit
counts printed beside each other must be equal).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

REPOSITORY = "https://github.com/GeeeekExplorer/nano-vllm"
CACHE_DIR = Path.home() / ".cache" / "kvplan" / "nano-vllm"
FILES = ("sampling_params", "engine/sequence", "engine/block_manager")


def find_checkout(given: str | None) -> tuple[Path | None, str]:
    """A nano-vllm checkout, and how it was found (or why there is none)."""
    for candidate in (given, os.environ.get("NANO_VLLM_DIR"), str(CACHE_DIR)):
        if candidate and (Path(candidate) / "nanovllm" / "engine" / "block_manager.py").is_file():
            return Path(candidate), f"nano-vllm from {candidate}"
    try:
        CACHE_DIR.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--depth", "1", REPOSITORY, str(CACHE_DIR)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return (
            None,
            f"no nano-vllm checkout (--nano-vllm DIR or $NANO_VLLM_DIR) and cloning {REPOSITORY} "
            f"failed ({type(error).__name__})",
        )
    return CACHE_DIR, f"nano-vllm cloned into {CACHE_DIR}"


def load_block_manager(checkout: Path) -> tuple[Any, Any]:
    """(BlockManager, Sequence) from the checkout's own files, its package __init__ skipped."""
    for package in ("nanovllm", "nanovllm.engine"):
        module = types.ModuleType(package)
        module.__path__ = [str(checkout / package.replace(".", "/"))]
        sys.modules[package] = module
    loaded = {}
    for name in FILES:
        dotted = "nanovllm." + name.replace("/", ".")
        spec = importlib.util.spec_from_file_location(dotted, checkout / "nanovllm" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[dotted] = module
        spec.loader.exec_module(module)
        loaded[name] = module
    return loaded["engine/block_manager"].BlockManager, loaded["engine/sequence"].Sequence


def prompt_tokens(request: Any) -> list[int]:
    """Token ids standing for a trace prompt: a function of its block ids and positions only."""
    span = request.hash_block_tokens
    positions = np.arange(request.prompt_len, dtype=np.int64)
    ids = np.asarray(request.block_hashes, dtype=np.int64)
    return (ids[positions // span] * span + positions % span).tolist()


def replay(
    checkout: Path, requests: list[Any], block_size: int, num_blocks: int
) -> tuple[int, int, float]:
    """Every prompt alone through nano-vllm's block manager, in arrival order: (hit tokens,
    queried tokens, CPU seconds). Building the token lists is not timed."""
    BlockManager, Sequence = load_block_manager(checkout)
    Sequence.block_size = block_size
    manager = BlockManager(num_blocks, block_size)
    hits = queried = 0
    seconds = 0.0
    for request in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
        seq = Sequence(prompt_tokens(request))
        started = time.process_time()
        cached = manager.can_allocate(seq)
        if cached < 0:
            raise RuntimeError(f"nano-vllm cannot hold request {request.request_id} alone")
        manager.allocate(seq, cached)
        seq.num_scheduled_tokens = len(seq) - seq.num_cached_tokens
        hits += seq.num_cached_tokens
        queried += len(seq)
        manager.hash_blocks(seq)
        manager.deallocate(seq)
        seconds += time.process_time() - started
    return hits, queried, seconds
