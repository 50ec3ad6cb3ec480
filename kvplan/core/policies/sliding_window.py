"""sliding-window: the newest `budget` tokens, kept at their positions. The one policy that
composes with prefix caching, as vLLM's SlidingWindowManager does: every held slot keeps
its own token, so a cached block still holds the tokens its hash names."""

from __future__ import annotations

from kvplan.core.policies.base import WindowPolicy


class SlidingWindow(WindowPolicy):
    name = "sliding-window"
    help = "the newest budget tokens"
    order = 0
