"""The shipped model and GPU catalogs: profiles/ (installed as the package
kvplan.profiles_data). Resolving what a user types into one of them, or into a config found
elsewhere, is kvplan/spec/resolve.py's job.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from kvplan.spec import GpuSpec


def profiles_dir() -> Path:
    try:
        return Path(str(resources.files("kvplan.profiles_data")))
    except ModuleNotFoundError:  # running from a source tree that was never installed
        return Path(__file__).resolve().parents[2] / "profiles"


MODELOPT_SIDECAR = "hf_quant_config.json"


@dataclass(frozen=True)
class ModelProfile:
    name: str
    file: str
    hf_repo: str
    source: str
    aliases: tuple[str, ...] = ()
    license: str | None = None
    published_params_b: float | None = None
    published_active_b: float | None = None
    published_params_source: str | None = None
    quant_file: str | None = None  # a ModelOpt export's hf_quant_config.json, kept beside it

    @property
    def path(self) -> Path:
        return profiles_dir() / "models" / self.file

    @property
    def quant_path(self) -> Path | None:
        return profiles_dir() / "models" / self.quant_file if self.quant_file else None

    def config(self) -> dict[str, Any]:
        """The profile's config.json, with its quantization sidecar where it has one."""
        return read_config(self.path, self.quant_path)


@cache
def model_profiles() -> dict[str, ModelProfile]:
    index = tomllib.loads((profiles_dir() / "models" / "index.toml").read_text())
    profiles = {}
    for entry in index["model"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        profiles[entry["name"]] = ModelProfile(**entry)
    return profiles


@cache
def gpu_profiles() -> dict[str, GpuSpec]:
    table = tomllib.loads((profiles_dir() / "gpus.toml").read_text())
    return {
        entry["name"]: GpuSpec(**{**entry, "aliases": tuple(entry.get("aliases", ()))})
        for entry in table["gpu"]
    }


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def lookup(name: str, entries: dict[str, Any], kind: str, hint: str) -> Any:
    wanted = _normalize(name)
    names: dict[str, str] = {}
    for key, entry in entries.items():
        names[_normalize(key)] = key
        for alias in getattr(entry, "aliases", ()):
            names[_normalize(alias)] = key
        repo = getattr(entry, "hf_repo", None)
        if repo:
            names[_normalize(repo)] = key
            names[_normalize(repo.split("/")[-1])] = key
    if wanted in names:
        return entries[names[wanted]]
    close = difflib.get_close_matches(wanted, list(names), n=3, cutoff=0.5)
    suggestion = f"; did you mean {', '.join(sorted({names[c] for c in close}))}?" if close else ""
    raise ValueError(f"unknown {kind} '{name}'{suggestion}; {hint}")


def _json_object(file: Path) -> dict[str, Any]:
    try:
        config = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(
            f"malformed config '{file}': {err}; fix the JSON or re-download the file"
        ) from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise ValueError(
            f"malformed config '{file}': nested too deeply to be a model config; "
            "pass a Hugging Face config.json"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"malformed config '{file}': expected a JSON object")
    return config


def read_config(path: Path, quant_sidecar: Path | None = None) -> dict[str, Any]:
    """A config.json file, or a model directory holding one. A ModelOpt export keeps its
    quantization in hf_quant_config.json beside config.json; where config.json has no
    quantization_config, that file is read as one, as vLLM reads it (ModelConfig's quant
    config lookup). `quant_sidecar` names it for a catalog file that is not a config.json."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(
            f"no config.json at '{path}'; pass a Hugging Face config.json or a model directory"
        )
    config = _json_object(file)
    sidecar = quant_sidecar or (
        file.with_name(MODELOPT_SIDECAR) if file.name == "config.json" else None
    )
    if "quantization_config" not in config and sidecar is not None and sidecar.is_file():
        config["quantization_config"] = {"quant_method": "modelopt", **_json_object(sidecar)}
    return config
