"""Real mode's block hashes: SHA-256 chained over the parent digest and the token ids (vLLM's
hash_block_tokens scheme), identical across processes, and a token check on every hit."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys

import pytest

from kvplan.core.hashing import STABLE_ROOT, block_hashes, chained_hashes, stable_chained_hashes
from kvplan.workload.request import Request


def test_stable_hash_by_hand() -> None:
    tokens = tuple(range(100, 120))  # two full blocks of 8, and 4 tokens that form no block
    first = hashlib.sha256(STABLE_ROOT + struct.pack("<8q", *tokens[:8])).digest()
    second = hashlib.sha256(first + struct.pack("<8q", *tokens[8:16])).digest()
    expected = [int.from_bytes(d[:8], "little") & (2**63 - 1) for d in (first, second)]
    assert stable_chained_hashes(tokens, 8) == expected


def test_equal_hashes_mean_equal_prefixes() -> None:
    a = stable_chained_hashes((1, 2, 3, 4, 5, 6, 7, 8), 4)
    b = stable_chained_hashes((1, 2, 3, 4, 5, 6, 7, 9), 4)
    c = stable_chained_hashes((0, 2, 3, 4, 5, 6, 7, 8), 4)
    assert a[0] == b[0] and a[1] != b[1]
    assert c[0] != a[0] and c[1] != a[1]  # the chain carries the first block's difference


def test_same_values_in_another_process() -> None:
    probe = (
        "from kvplan.core.hashing import stable_chained_hashes as h; print(h(tuple(range(50)), 16))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("0", "123")
    }
    assert outputs == {str(stable_chained_hashes(tuple(range(50)), 16)) + "\n"}


def test_simulated_hashes_unchanged_by_default() -> None:
    request = Request(0, 0.0, 32, 4, prompt_tokens=tuple(range(32)))
    assert block_hashes(request, 16) == chained_hashes(tuple(range(32)), 16)
    assert block_hashes(request, 16, stable=True) == stable_chained_hashes(tuple(range(32)), 16)


def test_real_runner_refuses_a_hit_with_other_tokens() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from kvplan.real.runner import RealRunner

    runner = RealRunner.__new__(RealRunner)
    runner.block_size, runner.block_tokens, runner.checked = 4, {}, set()
    writer = SimpleNamespace(
        request=SimpleNamespace(request_id=0), sample_index=0, dropped_blocks=0, block_table=[7, 3]
    )
    runner._check_and_record(writer, [1, 2, 3, 4, 5, 6, 7, 8], 0, 8)
    assert runner.block_tokens == {7: (1, 2, 3, 4), 3: (5, 6, 7, 8)}
    same = SimpleNamespace(
        request=SimpleNamespace(request_id=1), sample_index=0, dropped_blocks=0, block_table=[7, 9]
    )
    runner._check_and_record(same, [1, 2, 3, 4, 0, 0], 4, 6)  # a true hit on block 7 passes
    other = SimpleNamespace(
        request=SimpleNamespace(request_id=2), sample_index=0, dropped_blocks=0, block_table=[7, 9]
    )
    with pytest.raises(RuntimeError, match="hash collision"):
        runner._check_and_record(other, [1, 2, 3, 5, 0, 0], 4, 6)
    # a sliding window's hit skips logical block 0: its table starts at logical block 1 (block 3)
    window = SimpleNamespace(
        request=SimpleNamespace(request_id=3), sample_index=0, dropped_blocks=1, block_table=[3, 9]
    )
    runner._check_and_record(window, [0, 0, 0, 0, 5, 6, 7, 8, 0, 0], 8, 10)
    shifted = SimpleNamespace(
        request=SimpleNamespace(request_id=4), sample_index=0, dropped_blocks=1, block_table=[3, 9]
    )
    with pytest.raises(RuntimeError, match="block 3 matched request 4"):
        runner._check_and_record(shifted, [5, 6, 7, 8, 1, 2, 3, 4, 0, 0], 8, 10)
    del torch
