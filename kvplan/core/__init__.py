"""The paged KV engine shared by simulated and real mode: block pool, block hashing,
sequences, the continuous-batching scheduler, the engine loop and its metrics; kv/ holds the
allocators and tiers/ the offload tiers. Pure Python: no torch, pandas or matplotlib."""
