"""One resolver from what a user types, or a log or a benchmark page shows, to a model spec.

Tried in order, each step recorded so a failure can list them:

1. a shipped profile by name, HF repo id or alias (`llama-3.1-8b`, `meta-llama/Llama-3.1-8B`);
2. a local config.json or model folder;
3. the local Hugging Face cache (`org/name`, or a bare `name` held there under one org);
4. the Hugging Face Hub, when online: config.json and the safetensors headers, cached;
5. the catalog by shape-preserving name: the same name once fine-tuning suffixes
   (`-Instruct`, `-chat`, `-it`, `-hf`), quantization suffixes (`-FP8-dynamic`, `-AWQ`,
   `-GPTQ-Int4`, `-quantized.w8a8`, `-bnb-4bit`, ...) and a release-date suffix (`-0905`,
   `-2507`) are set aside, and the organisation is ignored. Such a match always carries a
   note naming what was matched and why the shapes agree; a quantization suffix becomes the
   weight format, since the name is then all there is to read it from.

A repo id may carry a revision (`org/name@rev`). Prose around a name (`Qwen3-14B (as
'Qwen3-14B')`) and local paths (`/models/Qwen2-7B-Instruct/`) are read by their first word
and last path component.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from kvplan.spec import GpuSpec, ModelSpec
from kvplan.spec.gpu_names import read_gpu_name
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.hf_hub import (
    CheckpointFiles,
    cached_repos,
    cached_snapshot,
    hub_cache_dir,
    hub_checkpoint,
    hub_config,
    local_checkpoint,
    offline,
)
from kvplan.spec.profiles import ModelProfile, gpu_profiles, lookup, model_profiles, read_config

# Fine-tuning keeps every shape: these suffixes name a training recipe, not an architecture.
TUNING_SUFFIXES = ("instruct", "chat", "it", "hf", "base", "sft", "dpo", "rl", "thinking")
# Quantization keeps the shapes and changes the weight format: suffix -> kvplan weight dtype.
QUANT_SUFFIXES: tuple[tuple[str, str], ...] = (
    (r"quantized[.-]w8a8", "int8"),
    (r"w8a8(-fp8)?", "int8"),
    (r"w8a16", "int8"),
    (r"w4a16", "int4"),
    (r"fp8(-dynamic|-block|-kv|-static)*", "fp8"),
    (r"int8", "int8"),
    (r"gptq(-int4|-int8)?", "int4"),
    (r"awq", "int4"),
    (r"(bnb-)?4bit", "int4"),
    (r"(bnb-)?8bit", "int8"),
    (r"int4", "int4"),
    (r"nvfp4", "fp4"),
    (r"mxfp4", "fp4"),
    (r"fp4", "fp4"),
    (r"auto-?round(-int4)?", "int4"),
    (r"nf4", "int4"),
)
DATE_SUFFIX = r"\d{4}"  # Qwen's -2507, Kimi's -0905: a re-release of the same architecture


@dataclass(frozen=True)
class ModelQuery:
    """What was typed, split into a repo id (or bare name) and a revision."""

    repo: str  # 'org/name' or 'name'
    revision: str | None

    @property
    def name(self) -> str:
        return self.repo.split("/")[-1]

    @property
    def org(self) -> str | None:
        return self.repo.split("/")[0] if "/" in self.repo else None


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    via: str  # profile, path, hf-cache, hub, catalog-match
    note: str | None = None  # why a catalog entry stands in for what was asked
    weight_hint: str | None = None  # weight dtype read from the name (catalog matches only)
    checkpoint: CheckpointFiles | None = None


def parse_query(text: str) -> ModelQuery:
    raw = text.strip()
    word = raw.split(" (")[0].strip().strip("'\"")
    revision = None
    if "@" in word and not word.startswith(("/", ".", "~")):
        word, revision = word.rsplit("@", 1)
    word = word.rstrip("/")
    if word.startswith(("/", ".", "~")) or word.count("/") > 1:
        word = word.split("/")[-1]  # a local path that does not exist here: its folder name
    return ModelQuery(word, revision or None)


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or text.startswith((".", "/", "~")) or Path(text).exists()


def canonical(name: str) -> str:
    """A name's comparable form: lower case, one separator, a digit run split from the letters
    before it ('Qwen2.5' and 'qwen-2.5', 'Llama2-7B' and 'llama-2-7b' agree)."""
    text = re.sub(r"[\s_]+", "-", name.strip().lower())
    text = re.sub(r"(?<=[a-z])(?=\d)", "-", text)
    return re.sub(r"-+", "-", text).strip("-")


def strip_suffixes(name: str) -> tuple[str, list[str], str | None]:
    """(the name without shape-preserving suffixes, the suffixes removed, the weight dtype a
    quantization suffix names)."""
    text = re.sub(r"[\s_]+", "-", name.strip().lower())
    removed: list[str] = []
    hint: str | None = None
    changed = True
    while changed:
        changed = False
        for pattern, dtype in QUANT_SUFFIXES:
            match = re.search(rf"[-.]({pattern})$", text)
            if match:
                removed.append(match.group(1))
                hint = hint or dtype
                text = text[: match.start()]
                changed = True
        for suffix in TUNING_SUFFIXES:
            # A recipe word anywhere between the size and a version ('Mixtral-8x7B-Instruct-v0.1').
            match = re.search(rf"-{suffix}(?=$|-)", text)
            if match and match.start() > 0:
                removed.append(suffix)
                text = text[: match.start()] + text[match.end() :]
                changed = True
        match = re.search(rf"-({DATE_SUFFIX})$", text)
        if match:
            removed.append(match.group(1))
            text = text[: match.start()]
            changed = True
    return canonical(text), removed, hint


@lru_cache(maxsize=1)
def _catalog_keys() -> dict[str, list[ModelProfile]]:
    keys: dict[str, list[ModelProfile]] = {}
    for profile in model_profiles().values():
        for name in {
            profile.name,
            profile.hf_repo.split("/")[-1],
            *(a.split("/")[-1] for a in profile.aliases),
        }:
            keys.setdefault(strip_suffixes(name)[0], []).append(profile)
    return keys


@lru_cache(maxsize=1)
def _exact_keys() -> tuple[dict[str, ModelProfile], dict[str, ModelProfile]]:
    """(canonical name, repo id or alias -> profile; canonical repo name without its org ->
    profile), built once: the first for any query, the second for a bare name."""
    full: dict[str, ModelProfile] = {}
    bare: dict[str, ModelProfile] = {}
    for profile in model_profiles().values():
        for name in (profile.name, profile.hf_repo, *profile.aliases):
            full.setdefault(canonical(name), profile)
        bare.setdefault(canonical(profile.hf_repo.split("/")[-1]), profile)
    return full, bare


def exact_profile(query: ModelQuery) -> ModelProfile | None:
    full, bare = _exact_keys()
    found = full.get(canonical(query.repo)) or full.get(canonical(query.name))
    if found is None and query.org is None:
        found = bare.get(canonical(query.name))
    return found


def catalog_match(query: ModelQuery) -> tuple[ModelProfile, str, str | None] | None:
    """The catalog entry whose name agrees once shape-preserving suffixes are set aside,
    with the note saying so, and the weight dtype a quantization suffix names."""
    key, removed, hint = strip_suffixes(query.name)
    candidates = _catalog_keys().get(key)
    if not candidates:
        return None
    # Prefer the entry that shares the query's own suffixes and adds none of its own (a
    # base checkpoint for '-FP8' typed by a republisher, never another org's NVFP4 export),
    # then the one whose name kept the most of what was typed, then the catalog's order.
    typed = canonical(query.name)

    def closeness(candidate: ModelProfile) -> tuple[int, int]:
        own = strip_suffixes(candidate.hf_repo.split("/")[-1])[1]
        extra = sum(1 for suffix in own if suffix not in removed)
        return -extra, len(_common_prefix(typed, canonical(candidate.hf_repo.split("/")[-1])))

    profile = max(candidates, key=closeness)
    reasons = []
    tuning = [s for s in removed if s in TUNING_SUFFIXES]
    quant = [s for s in removed if any(re.fullmatch(p, s) for p, _ in QUANT_SUFFIXES)]
    dated = [s for s in removed if re.fullmatch(DATE_SUFFIX, s)]
    own = set(strip_suffixes(profile.hf_repo.split("/")[-1])[1])
    tuning = [s for s in tuning if s not in own]
    if tuning:
        reasons.append(f"'-{'-'.join(tuning)}' names a fine-tune, which keeps every shape")
    if quant:
        reasons.append(
            f"'-{'-'.join(quant)}' names a quantization, which keeps the shapes and sets the "
            "weight "
            f"format ({hint} weights, read from the name)"
        )
    if dated:
        reasons.append(
            f"'-{'-'.join(dated)}' dates a re-release of the same architecture (assumed)"
        )
    if query.org and query.org.lower() != profile.hf_repo.split("/")[0].lower():
        reasons.append(f"the organisation '{query.org}' republishes it (ignored)")
    if not reasons:
        reasons.append("the names agree apart from case and separators")
    note = (
        f"'{query.repo}' sized as catalog profile {profile.name} ({profile.hf_repo}): "
        + "; ".join(reasons)
    )
    return profile, note, hint


def _common_prefix(a: str, b: str) -> str:
    size = 0
    while size < min(len(a), len(b)) and a[size] == b[size]:
        size += 1
    return a[:size]


def _label(repo: str) -> str:
    """A spec name for a repo outside the catalog: its name, lower case (file names use it)."""
    return re.sub(r"[^a-z0-9.+-]+", "-", repo.split("/")[-1].lower()).strip("-")


def _cached(query: ModelQuery) -> tuple[str, Path] | None:
    """A cache snapshot for the query: its repo id exactly, or a bare name held under one org."""
    snapshot = cached_snapshot(query.repo, query.revision) if query.org else None
    if snapshot is not None:
        return query.repo, snapshot
    if query.org is None:
        matches = [
            repo
            for repo in cached_repos()
            if canonical(repo.split("/")[-1]) == canonical(query.name)
        ]
        if len(matches) == 1:
            found = cached_snapshot(matches[0], query.revision)
            if found is not None:
                return matches[0], found
    return None


def resolve_model(text: str) -> ResolvedModel:
    """The model `text` names (see the module docstring for the order tried)."""
    return _resolve(text, str(hub_cache_dir()), offline())


@lru_cache(maxsize=256)
def _resolve(text: str, cache: str, is_offline: bool) -> ResolvedModel:
    if not text or not text.strip():
        raise ValueError(
            "no model given; pass a profile name, a Hugging Face id (org/name) or a config.json "
            "path"
        )
    tried: list[str] = []
    if _looks_like_path(text.strip()):
        path = Path(text.strip()).expanduser()
        if path.exists():
            label = (
                path.parent.name
                if path.name == "config.json"
                else path.stem
                if path.is_file()
                else path.name
            )
            folder = path if path.is_dir() else path.parent
            spec = model_spec_from_config(read_config(path), label, str(path))
            return ResolvedModel(spec, "path", checkpoint=local_checkpoint(folder))
        read_config(path)  # raises the one error for a missing config.json or folder
    query = parse_query(text)
    profile = exact_profile(query)
    if profile is not None:
        spec = model_spec_from_config(profile.config(), profile.name, profile.hf_repo)
        return ResolvedModel(spec, "profile")
    tried.append("it is not a shipped profile name, HF id or alias")
    found = _cached(query)
    if found is not None:
        repo, snapshot = found
        config = read_config(snapshot / "config.json")
        files = local_checkpoint(snapshot) or hub_checkpoint(repo, query.revision)
        spec = model_spec_from_config(
            config, _label(repo), f"{repo} (Hugging Face cache {snapshot})"
        )
        return ResolvedModel(spec, "hf-cache", checkpoint=files)
    tried.append(f"not in the Hugging Face cache at {cache}")
    if query.org is not None:
        try:
            config, snapshot = hub_config(query.repo, query.revision)
        except RuntimeError as err:
            tried.append(f"the Hugging Face Hub lookup of {query.repo} failed ({err})")
        else:
            spec = model_spec_from_config(
                config, _label(query.repo), f"{query.repo} (Hugging Face Hub)"
            )
            return ResolvedModel(spec, "hub", checkpoint=hub_checkpoint(query.repo, query.revision))
    else:
        tried.append(
            "not looked up on the Hugging Face Hub, which needs an organisation (org/name)"
        )
    matched = catalog_match(query)
    if matched is not None:
        profile, note, hint = matched
        spec = model_spec_from_config(profile.config(), profile.name, profile.hf_repo)
        if (
            hint is not None
        ):  # the name is all there is to read the format from: every command sizes it so
            spec = replace(spec, weight_dtype=hint, checkpoint_quant=None)
        return ResolvedModel(spec, "catalog-match", note=note, weight_hint=hint)
    tried.append(
        "and no catalog profile shares its name once -Instruct/-FP8/date suffixes are set aside"
    )
    # Each step tried, as one sentence about the name: "it is not ...; not in ...; and no ..."
    raise ValueError(
        f"unknown model '{text.strip()}'{_suggestion(query)}: "
        + "; ".join(tried)
        + "; run 'kvplan profiles models' for the list, or pass a path to a config.json"
    )


def _suggestion(query: ModelQuery) -> str:
    import difflib

    names = {canonical(p.name): p.name for p in model_profiles().values()}
    close = difflib.get_close_matches(canonical(query.name), list(names), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(sorted({names[c] for c in close}))}?)" if close else ""


def load_model(name_or_path: str) -> ModelSpec:
    """The spec of whatever names a model (the entry point every command and loader calls)."""
    return resolve_model(name_or_path).spec


def load_gpu(name: str) -> GpuSpec:
    """A GPU profile by name or alias, else the GPU a free-form name describes as logs and
    benchmark pages write it (kvplan/spec/gpu_names.py)."""
    try:
        return read_gpu_name(name)
    except ValueError:
        # The catalog lookup's own error, with its nearest names, is the one to show.
        return lookup(name, gpu_profiles(), "GPU", "run 'kvplan profiles gpus' for the list")
