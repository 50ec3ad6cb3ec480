"""KV formats and eviction policies measured on a real model: perplexity, KL and greedy
agreement against the full cache."""
