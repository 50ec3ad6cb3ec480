"""What the serving engines do with memory and blocks, release by release: vLLM (V0, V1, its
CPU backend) and SGLang. Their startup memory profile and defaults, KV cache groups and hybrid
accounting, the pool arithmetic they share, and the scheduling rules of each vLLM release.
Imports only kvplan.spec."""
