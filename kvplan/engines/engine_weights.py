"""Weights as vLLM holds them on the GPU, where its kernels need another layout than the
checkpoint's.

MXFP4 MoE experts (gpt-oss): each MoE kernel backend pads the expert matrices to its tile
before loading them (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py,
mxfp4_round_up_hidden_size_and_intermediate_size; backend chosen in select_mxfp4_moe_backend
from the GPU's compute capability):

- Hopper (SM90): the Triton kernels (triton_kernels' matmul_ogs), intermediate size rounded up
  to 64, hidden size kept; biases converted to fp32.
- ROCm (CDNA): AITER, both sizes rounded up to 256.
- every other NVIDIA GPU (Ampere, Ada, Blackwell): FlashInfer TRT-LLM on SM100, Marlin
  elsewhere; both round the intermediate size up to 128 and the hidden size up to 256; biases
  stay bf16.

So gpt-oss-20b (hidden 2880, intermediate 2880) holds its 768 experts at 2944 x 3072 on an L4
or A100: 10.32 GiB instead of the checkpoint's 9.47 (vLLM logs "Model loading took 13.72 GiB"
with Marlin). Named simplification: the Triton path's swizzled layout is taken at its logical
size.
"""

from __future__ import annotations

from kvplan import cdiv
from kvplan.engines.serving_engine import is_vllm
from kvplan.spec import GpuSpec, ModelSpec, parse_kv_format
from kvplan.spec.roofline import Roofline

MXFP4_BLOCK = 32  # one E8M0 (1-byte) scale per 32 FP4 values


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def mxfp4_alignment(gpu: GpuSpec) -> tuple[int, int, int]:
    """(intermediate multiple, hidden multiple, bias bytes) of the backend vLLM picks on `gpu`."""
    if gpu.family == "hopper":
        return 64, 1, 4
    if gpu.family.startswith("cdna"):
        return 256, 256, 2
    return 128, 256, 2


def _moe_intermediate(model: ModelSpec) -> tuple[int, bool] | None:
    """The experts' intermediate size and whether they carry biases, read back from the
    parameter count (per expert: 3 x hidden x I weights, plus 2I + hidden biases if any)."""
    p, h = model.params, model.hidden_size
    experts = model.num_experts * model.num_layers
    if not experts or p.experts_total % experts:
        return None
    per_expert = p.experts_total // experts
    # The biased form first: with I == hidden (gpt-oss) 3hI + 2I + h is also a multiple of 3h.
    if (per_expert - h) % (3 * h + 2) == 0:
        return (per_expert - h) // (3 * h + 2), True
    if per_expert % (3 * h) == 0:
        return per_expert // (3 * h), False
    return None


def mxfp4_expert_bytes_per_gpu(model: ModelSpec, gpu: GpuSpec, tp: int) -> float | None:
    """Bytes of the MXFP4 experts as vLLM loads them on one GPU; None if the checkpoint has none."""
    quant = model.checkpoint_quant
    shape = _moe_intermediate(model)
    if quant is None or quant.dtype != "mxfp4" or not quant.experts_only or shape is None:
        return None
    intermediate, biased = shape
    align_i, align_h, bias_bytes = mxfp4_alignment(gpu)
    inner = _round_up(cdiv(intermediate, tp), align_i)
    hidden = _round_up(model.hidden_size, align_h)
    values = 3 * hidden * inner  # gate and up (2 x inner x hidden), down (hidden x inner)
    per_expert = (
        values / 2 + values / MXFP4_BLOCK + ((2 * inner + hidden) * bias_bytes if biased else 0)
    )
    return per_expert * model.num_experts * model.num_layers


def loaded_weight_bytes_per_gpu(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    weight_dtype: str | None,
    engine: str,
    expert_split: int = 1,
) -> float:
    """What one GPU holds after vLLM loads the weights (the checkpoint's bytes otherwise).

    expert_split: the data-parallel ranks the routed experts are spread over besides TP
    (`--enable-expert-parallel` with `--data-parallel-size N`: expert-parallel size N x TP,
    whole experts per rank, attention and embeddings replicated on every DP rank;
    vllm FusedMoEParallelConfig.make)."""
    roofline = Roofline(model, gpu, tp, parse_kv_format("bf16"), weight_dtype)
    weights = roofline.weight_bytes_per_gpu
    if expert_split > 1:
        weights -= roofline.expert_bytes_per_gpu * (1 - 1 / expert_split)
    quant = model.checkpoint_quant
    if is_vllm(engine) and weight_dtype is None and quant is not None:
        loaded = mxfp4_expert_bytes_per_gpu(model, gpu, tp)
        if loaded is not None:
            # the checkpoint's experts as kvplan sizes them: every expert parameter at the format's
            # bits
            stored = (
                model.params.experts_total
                * (quant.weight_bits + quant.scale_bits / quant.group_size)
                / 8
                / tp
            )
            weights += (loaded - stored) / expert_split
    return weights
