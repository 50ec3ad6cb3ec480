"""A step's time as the sum of its operators (docs/step_time.md).

`shapes.py` lists what one forward pass runs on one GPU for a model at a tensor-parallel
degree: its linear layers as GEMM shapes in their weight formats, its routed experts, its
attention by kind (one class per kind of attention group), the all-reduces, the elementwise
traffic, the LM head and the sampler. `sources.py` times each operator: a table measured on
the device (`kvplan profile`), NVIDIA's aiconfigurator tables where they cover the GPU and
engine (`aic_source.py`), else the physics roofline with a kernel-launch floor. `step.py`
composes a step from them, plus the engine's own time per step (`overhead.py`).
"""
