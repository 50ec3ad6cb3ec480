"""Load a transformers causal LM for real mode: a local checkpoint, or random weights in a
profile's shape. Never reaches a model hub (local_files_only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan.spec.hf_config import text_config
from kvplan.spec.profiles import model_profiles, read_config
from kvplan.spec.resolve import load_model
from kvplan.spec.setting_error import SettingError

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _torch_dtype(name: str) -> Any:
    import torch

    try:
        return getattr(torch, DTYPES[name])
    except KeyError:
        raise ValueError(f"unknown model dtype '{name}'; use one of: {', '.join(DTYPES)}") from None


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SettingError("{device} cuda was asked but no CUDA GPU is available; use {device} cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"unknown device '{device}'; use cpu, cuda or auto")
    return device


def load_causal_lm(
    model: str, model_path: str | None, layers: int | None, dtype: str, device: str, seed: int = 0
) -> tuple[Any, dict[str, Any]]:
    """(model in eval mode on `device`, its config dict). `layers` keeps the first N layers
    of a profile's shape so a large model's structure fits a small machine."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # keep stderr for kvplan's own one-line errors
    torch_dtype = _torch_dtype(dtype)
    if model_path:
        path = Path(model_path).expanduser()
        config = read_config(path)
        try:
            lm = AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, dtype=torch_dtype
            )
        except Exception as err:  # transformers raises many types for a broken folder
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"model directory '{path}' does not load ({first}); pass a local transformers "
                "checkpoint folder with config.json and weights"
            ) from None
    else:
        spec = load_model(model)
        profile = model_profiles().get(spec.name)
        config = text_config(read_config(profile.path if profile else Path(spec.source)))
        config = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map")}
        if layers is not None:
            if layers < 1:
                raise SettingError("{layers} must be at least 1, got {got}", got=layers)
            config["num_hidden_layers"] = min(layers, int(config["num_hidden_layers"]))
            if isinstance(config.get("layer_types"), list):
                config["layer_types"] = config["layer_types"][: config["num_hidden_layers"]]
        try:
            hf_config = AutoConfig.for_model(**config)
        except Exception as err:
            raise SettingError(
                "transformers cannot build model type '{kind}' ({why}); pass {model_path} with "
                "a local checkpoint",
                kind=config.get("model_type"),
                why=err,
            ) from None
        torch.manual_seed(seed)
        lm = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype)
    return lm.to(device).eval(), config
