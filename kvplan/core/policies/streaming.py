"""StreamingLLM (Xiao et al. 2023): the first 4 "sink" tokens + the newest, kept at their
positions (the sink block stays while the window slides).

`streaming` re-indexes positions inside the cache as the paper does (a kept token's
position is its slot in the cache); `streaming-abspos` keeps each token's original
position, a named variant, not the paper's method."""

from __future__ import annotations

from kvplan.core.policies.base import SINKS, WindowPolicy

_SINKS_CONFLICT = (
    "StreamingLLM writes the 4 sinks over the first slots of each query's window, so its blocks "
    "stop "
    "holding the tokens their hashes name and cannot be shared"
)


class Streaming(WindowPolicy):
    name = "streaming"
    help = "StreamingLLM: 4 sink tokens + the newest, positions re-indexed in the cache"
    order = 1
    sinks = SINKS
    reindexes_positions = True
    prefix_conflict = _SINKS_CONFLICT


class StreamingAbsPos(Streaming):
    name = "streaming-abspos"
    help = "streaming with each token's original position (a named variant)"
    order = 2
    reindexes_positions = False
