"""Checkpoint quantization configs on a small constructed Llama shape, and the two calls the
checkpoint tests size them with (test_checkpoint_quant.py, test_checkpoint_mixed.py)."""

from __future__ import annotations

from kvplan.spec.checkpoint_quant import checkpoint_quant
from kvplan.spec.hf_config import model_spec_from_config

# A Llama shape: hidden 4096, 2 layers, 32 heads of 128, 8 KV heads, MLP 11008, vocab 32000, untied.
# attention / layer = 4096*4096 (q) + 2*4096*1024 (k, v) + 4096*4096 (o) = 41,943,040 -> 83,886,080
#   MLP / layer = 3*4096*11008 = 135,266,304 -> 270,532,608
#   embedding = lm_head = 32000*4096 = 131,072,000; norms (2*2 + 1)*4096 = 20,480
LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}
LINEAR = 83_886_080 + 270_532_608  # 354,418,688 quantizable weights
KEPT = 2 * 131_072_000 + 20_480  # 262,164,480 in 16 bit

GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def spec(quant: dict, **extra):
    return model_spec_from_config(
        {**LLAMA, **extra, "quantization_config": quant}, "test", "constructed"
    )


def quant(q: dict, layers: int = 2, **cfg):
    return checkpoint_quant({"quantization_config": q, **cfg}, layers)
