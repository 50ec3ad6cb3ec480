"""Behaviour is chosen by type: engines, attention kinds and run modes are told apart by their
classes, not by comparing their names. A name becomes a type in one place each (the config's
layer kinds, a log's or a user's engine word); every other comparison of such a name fails here.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kvplan"
NAMES = (
    # engines and their generations
    "vllm|vllm-v0|vllm-v1|sglang|v0|v1"
    # attention kinds
    "|full|sliding|chunked|mla|indexer|state|cross"
    # run modes
    "|real|sim|simulated"
)
COMPARISON = re.compile(
    rf"""(==|!=|\bin\b)\s*\(?["']({NAMES})["']|["']({NAMES})["']\s*(==|!=|\bin\b)"""
)
# where a word is parsed into its type, and how many comparisons that takes
PARSERS = {
    # config.json's layer-type words -> attention kinds (then GROUP_TYPES -> classes)
    "spec/layers.py": 7,
    # --engine's word -> a generation (then serving_engine -> its class)
    "engines/engine_releases.py": 1,
    # a startup log's engine words -> a generation
    "logs/log_setup.py": 2,
    # --output-format vllm, a table layout named after vLLM's, not an engine
    "cli/panels/output.py": 1,
}
# the classes themselves, which carry their names
HOMES = ("engines/serving_engine.py", "spec/attention_group.py", "bench/mode.py")
# other words spelled like those names: a policy called "full" (the whole cache), the
# estimate's "full" allocation
OTHER_MEANINGS = re.compile(r"policy|allocation|PolicySpec")


def _comparisons() -> Counter[str]:
    found: Counter[str] = Counter()
    for path in ROOT.rglob("*.py"):
        where = path.relative_to(ROOT).as_posix()
        if where in HOMES:
            continue
        for line in path.read_text().splitlines():
            if COMPARISON.search(line) and not OTHER_MEANINGS.search(line):
                found[where] += 1
    return found


def test_names_are_compared_only_where_they_become_types() -> None:
    assert dict(_comparisons()) == PARSERS


def test_the_check_sees_a_comparison_by_name() -> None:
    assert COMPARISON.search('    if setup.engine == "sglang":')
    assert COMPARISON.search("    if group.kind in ('mla', 'indexer'):")
    assert not COMPARISON.search("    if isinstance(group, MLAAttentionSpec):")
