"""kvplan: KV-cache capacity planning and benchmarking for LLM inference.

Importing kvplan loads no torch, triton, transformers, pandas or matplotlib: those live
inside the functions that need them, so estimation stays instant.
"""

__version__ = "0.1.0"
