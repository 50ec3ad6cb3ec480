"""Every KV cache format the layout and write_kv tests cover (test_kv_layouts.py,
test_kernels_write.py); plain names, so importing this loads neither torch nor triton."""

FORMATS = [
    "fp32",
    "fp16",
    "bf16",
    "fp8-e4m3",
    "fp8-e5m2",
    "int8",
    "int4",
    "int2",
    "int4-g32",
    "int8-g16",
    "int4-g64",
    "int8-tensor",
    "int4-tensor",
]
