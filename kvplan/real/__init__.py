"""Real mode: a transformers model calling kvplan's paged attention over torch block pools,
wall-clock step times, and real offload storage. The only layer (with quality/ and
kvplan.kernels) where torch is imported."""
