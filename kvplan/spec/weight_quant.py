"""Which weights a `--weight-dtype` override quantizes (the recipes: 'fp8', 'int4', 'fp8-meta').

A checkpoint's own format, read from its quantization_config with scales and zero points, is
spec/checkpoint_quant.py's CheckpointQuant; these recipes size what a flag asks for instead.

Serving engines quantize the linear layers only: FP8, INT8 (W8A8), AWQ/GPTQ INT4 and NVFP4
checkpoints keep the input embedding, the LM head, norms and MoE routers in 16 bit (vLLM's
ParallelLMHead and VocabParallelEmbedding are unquantized for these methods). Some published
checkpoints leave more out, named in their config.json's `modules_to_not_convert`:

- Meta's Llama-3.1-405B-Instruct-FP8 (quant_method fbgemm_fp8) keeps every self-attention
  projection in BF16, and the MLPs of the first and last layers (layers 0 and 125).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.kv_format import dtype_bytes

SIXTEEN_BIT = 2.0


@dataclass(frozen=True)
class WeightQuant:
    """A checkpoint's quantized element type and the linear weights it leaves in 16 bit."""

    dtype: str
    attention_quantized: bool = True
    edge_mlp_layers_kept: int = 0  # MLPs of this many layers (the first and last) stay 16 bit
    source: str = "linear layers quantized; embeddings, LM head, norms and routers in 16 bit"

    @property
    def element_bytes(self) -> float:
        return dtype_bytes(self.dtype)


RECIPES: dict[str, WeightQuant] = {
    "fp8-meta": WeightQuant(
        "fp8",
        attention_quantized=False,
        edge_mlp_layers_kept=2,
        source="meta-llama/Llama-3.1-405B-Instruct-FP8 config.json (fbgemm_fp8): "
        "modules_to_not_convert = all self_attn projections, layers 0 and 125's MLP, lm_head",
    ),
}


def weight_quant(name: str) -> WeightQuant:
    """A recipe by name, or the default recipe for a plain dtype ('fp8', 'int4', ...)."""
    recipe = RECIPES.get(name.lower())
    if recipe is not None:
        return recipe
    dtype_bytes(name)  # raises the one error for an unknown dtype
    return WeightQuant(name.lower())
