"""Where a model's config.json can come from besides the shipped catalog: the local Hugging
Face cache and, when online, the Hub itself (config files and safetensors headers only,
never weights).

The cache layout is huggingface_hub's: `<cache>/models--<org>--<name>/refs/<revision>`
holds a commit hash and `<cache>/models--<org>--<name>/snapshots/<hash>/` the files
(symlinks into `blobs/`). The cache folder is HF_HUB_CACHE, else HF_HOME/hub, else
XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub, as huggingface_hub resolves
it. Hub access honours HF_HUB_OFFLINE and HF_TOKEN; whatever it fetches lands in that same
cache, so a second run needs no network.
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvplan import MIB
from kvplan.spec.profiles import MODELOPT_SIDECAR, read_config

# Bytes per element of the safetensors dtypes (the format's own dtype names).
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "F4": 0.5,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
    "BOOL": 1,
}
HEADER_LIMIT = 100 * MIB
HUB_CONNECT_TIMEOUT_S = 3.0  # a safetensors header is JSON; anything larger is not one


@dataclass(frozen=True)
class CheckpointFiles:
    """What a checkpoint's safetensors files say without reading a weight: the exact bytes
    the weights take and the element count per stored dtype."""

    total_bytes: int
    elements_by_dtype: tuple[tuple[str, int], ...]
    source: str

    @property
    def elements(self) -> int:
        return sum(count for _, count in self.elements_by_dtype)


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cached_repos(cache: Path | None = None) -> list[str]:
    """Every model repo id the cache holds a snapshot of ('org/name')."""
    cache = cache or hub_cache_dir()
    if not cache.is_dir():
        return []
    repos = []
    for entry in sorted(cache.iterdir()):
        if entry.name.startswith("models--") and (entry / "snapshots").is_dir():
            repos.append("/".join(entry.name.removeprefix("models--").split("--", 1)))
    return repos


def cached_snapshot(
    repo: str, revision: str | None = None, cache: Path | None = None
) -> Path | None:
    """The snapshot folder of `repo` at `revision` (a branch, tag or commit; default main)
    that holds a config.json, or None. A repo id's case is matched loosely, as the Hub does."""
    cache = cache or hub_cache_dir()
    folder = cache / ("models--" + repo.replace("/", "--"))
    if not folder.is_dir() and cache.is_dir():
        wanted = folder.name.lower()
        folder = next((p for p in cache.iterdir() if p.name.lower() == wanted), folder)
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / (revision or "main")
    if ref.is_file():
        commit = ref.read_text().strip()
        if (snapshots / commit / "config.json").is_file():
            return snapshots / commit
    if revision and (snapshots / revision / "config.json").is_file():
        return snapshots / revision
    if revision:
        return None
    # No ref for main (a cache filled by revision only): the newest snapshot with a config.
    candidates = [p for p in snapshots.iterdir() if (p / "config.json").is_file()]
    return (
        max(candidates, key=lambda p: (p / "config.json").stat().st_mtime) if candidates else None
    )


def _header(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise ValueError(f"'{path}' is not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > HEADER_LIMIT:
            raise ValueError(f"'{path}' has a {length:,}-byte header: not a safetensors file")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"'{path}' has no safetensors header")
    return header


def _count(tensors: list[dict[str, Any]], source: str) -> CheckpointFiles:
    elements: dict[str, int] = {}
    total = 0.0
    for tensor in tensors:
        dtype = str(tensor.get("dtype"))
        count = math.prod(int(d) for d in tensor.get("shape", []))
        elements[dtype] = elements.get(dtype, 0) + count
        total += count * SAFETENSORS_DTYPE_BYTES.get(dtype, 2)
    return CheckpointFiles(int(total), tuple(sorted(elements.items())), source)


def local_checkpoint(folder: Path) -> CheckpointFiles | None:
    """Read the safetensors headers in `folder` (the weights themselves are never read);
    None when the folder holds no safetensors file (a config-only folder, a fake cache)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    tensors: list[dict[str, Any]] = []
    try:
        for file in files:
            header = _header(file)
            tensors += [v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    except (OSError, ValueError, json.JSONDecodeError):
        return None
    return _count(tensors, f"safetensors headers in {folder}")


@lru_cache(maxsize=4)
def hub_unreachable(endpoint: str) -> str | None:
    """Why the Hub cannot be reached, or None. One TCP connect with a short timeout, once per
    process: huggingface_hub retries a dead connection with back-off for about 20 s per file,
    which would turn an offline `kvplan estimate` of an unknown name into a long wait."""
    parsed = urllib.parse.urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme != "http" else 80)
    try:
        socket.create_connection((host, port), timeout=HUB_CONNECT_TIMEOUT_S).close()
    except OSError as err:
        return (
            f"{host} unreachable: {err.strerror or type(err).__name__}; set "
            "HF_HUB_OFFLINE=1 to skip the Hub"
        )
    return None


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_config(repo: str, revision: str | None) -> tuple[dict[str, Any], Path]:
    """Download config.json of `repo` into the cache (huggingface_hub does the caching);
    raises RuntimeError with the reason when offline, unreachable, unauthorised or not found."""
    if offline():
        raise RuntimeError("HF_HUB_OFFLINE is set")
    unreachable = hub_unreachable(hub_endpoint())
    if unreachable:
        raise RuntimeError(unreachable)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as err:  # a minimal install: the estimator does not need it
        raise RuntimeError(
            "huggingface_hub is not installed (pip install huggingface_hub)"
        ) from err

    def download(name: str) -> Path:
        return Path(
            hf_hub_download(
                repo,
                name,
                revision=revision,
                token=os.environ.get("HF_TOKEN") or None,
                cache_dir=hub_cache_dir(),
            )
        )

    try:
        path = download("config.json")
    except Exception as err:  # the Hub's errors are many classes; each one means "not from the Hub"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RuntimeError(f"{type(err).__name__}: {reason[:160]}") from None
    config = json.loads(path.read_text())
    if "quantization_config" not in config:
        # a ModelOpt export keeps its quantization beside config.json; most repos have none
        try:
            download(MODELOPT_SIDECAR)
        except Exception:  # absent (the usual case) or unreachable: the config stands alone
            pass
    return read_config(path), path.parent


def hub_checkpoint(repo: str, revision: str | None) -> CheckpointFiles | None:
    """Parameter counts per dtype from the Hub's safetensors headers (HTTP range reads, no
    weights), cached beside the config; None when offline or unavailable."""
    snapshot = cached_snapshot(repo, revision)
    memo = snapshot / ".kvplan-safetensors.json" if snapshot else None
    if memo is not None and memo.is_file():
        data = json.loads(memo.read_text())
        return CheckpointFiles(
            data["total_bytes"], tuple(map(tuple, data["elements_by_dtype"])), data["source"]
        )
    if offline() or hub_unreachable(hub_endpoint()):
        return None
    try:
        from huggingface_hub import get_safetensors_metadata

        metadata = get_safetensors_metadata(
            repo, revision=revision, token=os.environ.get("HF_TOKEN") or None
        )
    except Exception:  # no safetensors on the Hub (a .bin checkpoint), or no network
        return None
    tensors = [
        {"dtype": info.dtype, "shape": info.shape}
        for file in metadata.files_metadata.values()
        for info in file.tensors.values()
    ]
    files = _count(tensors, f"safetensors headers of {repo} on the Hugging Face Hub")
    if memo is not None:
        try:
            memo.write_text(
                json.dumps(
                    {
                        "total_bytes": files.total_bytes,
                        "elements_by_dtype": files.elements_by_dtype,
                        "source": files.source,
                    }
                )
            )
        except OSError:
            pass  # a read-only cache only costs a second range read next time
    return files
