"""Read a GPU name the way logs, nvidia-smi, torch.cuda.get_device_name() and benchmark pages
write it ("NVIDIA A100-SXM4-40GB", "H100 NVL (94GB)", "8xH100", "RTX4060", "AMD Instinct MI300X
(192GiB, 750W)", "NVIDIA A100-SXM4-80GB MIG 1g.10gb") and pick the catalog entry it names.

No table of strings: the catalog (profiles/gpus.toml) says for each entry its product as vendors
write it, its package (form), its memory and, for a MIG slice, its profile. A name is read as

1. an exact profile name or alias ('h100', 'a100-80gb', 'l4'): that entry;
2. otherwise tokens (letter and digit runs split apart, so "a100" is a|100 and can never match
   "a10" = a|10, nor "l4" = l|4 match "l40s" = l|40|s); the product is the longest catalog
   product whose tokens appear in a row (a leading "rtx" may be left out: "A6000", "3090");
3. a MIG profile ("1g.10gb") keeps only that product's slices with that profile;
4. a memory figure ("40GB", "80G", "(94GB)", "192GiB", "96 GB", a bare "A100-80") keeps the
   variants within 10% of it (datasheet GB against driver GiB: 79.22 for 80), the closest first;
   a figure no variant has is ignored and said so (GH200 480GB is Grace's LPDDR5X, not GPU memory);
5. a form word ("SXM4", "PCIe", "NVL", "Server", ...) keeps the variants in that package; "HBM3"
   implies SXM (nvidia-smi writes the H100 SXM as "NVIDIA H100 80GB HBM3", the PCIe card as
   "NVIDIA H100 PCIe") and is used only when no form word is given.

Ambiguity rule: when more than one variant is left, the one the catalog marks product_default
wins (the variant logs and benchmark pages most often mean: "NVIDIA A100" is the 80GB SXM part,
"H100" the SXM); failing that the variant in the default's package, then the smaller memory (a
wrong guess then errs towards too little memory). The result says so: GpuMatch.defaulted is True
and GpuMatch.note names the assumption and the fix. Exact profile names are never second-guessed:
the alias 'a100' is still a100-40gb.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from kvplan.spec.gpu import GpuSpec
from kvplan.spec.profiles import gpu_profiles, lookup
from kvplan.spec.setting_error import SettingError

HINT = "run 'kvplan profiles gpus' for the list or pass {gpu_memory_gib}"  # a SettingError template
# Series words that text may leave out before the model number ("A6000", "RTX 3090", "3090").
OPTIONAL_PREFIXES = ("rtx",)
# Package words as names write them -> the catalog's form.
FORM_WORDS = {
    "sxm": "sxm",
    "sxm2": "sxm",
    "sxm3": "sxm",
    "sxm4": "sxm",
    "sxm5": "sxm",
    "hgx": "sxm",
    "pcie": "pcie",
    "nvl": "nvl",
    "server": "server",
    "workstation": "workstation",
    "superchip": "superchip",
    "gcd": "gcd",
    "oam": "oam",
}
# Words that imply a package only by convention; used when no form word is given.
IMPLIED_FORMS = {"hbm3": "sxm"}
MEMORY_TOLERANCE = 0.10  # datasheet "80GB" against what drivers report (79.22 GiB) and rounding

_MIG = re.compile(r"(?<![a-z0-9])(\d+g\.\d+gb)(?:\+me)?")
_COUNT = re.compile(r"(?<![a-z0-9.])\d+\s*[x×*]\s*(?=[a-z])")  # "8xH100", "2x A100", "2*T4"
_MEMORY = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*(?:gib|gb|g)(?![a-z])")


@dataclass(frozen=True)
class GpuMatch:
    """The entry a name was read as, what was read, and what had to be assumed."""

    spec: GpuSpec
    note: str
    defaulted: bool = False  # the name left a choice the ambiguity rule settled


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+|\d+", text.lower())


@cache
def _patterns() -> list[tuple[tuple[str, ...], str]]:
    """(token pattern, product) pairs, longest pattern first so "a10g" beats "a10"."""
    pairs = set()
    for spec in gpu_profiles().values():
        if not spec.product:
            continue
        tokens = tuple(_tokens(spec.product))
        pairs.add((tokens, spec.product))
        if len(tokens) > 1 and tokens[0] in OPTIONAL_PREFIXES:
            pairs.add((tokens[1:], spec.product))
    return sorted(pairs, key=lambda p: (-len(p[0]), p[1]))


def _base_memory(spec: GpuSpec) -> float:
    """Memory a name's figure refers to: a MIG slice is named with its parent's size."""
    return gpu_profiles()[spec.mig_parent].memory_gib if spec.mig_parent else spec.memory_gib


def _product_memories(product: str) -> set[int]:
    return {round(_base_memory(s)) for s in gpu_profiles().values() if s.product == product}


def _find_products(tokens: list[str]) -> tuple[list[str], list[float]]:
    """Products in order of appearance, and memory figures written against them without a
    unit ("A100-80") or glued to them ("A10040GB", as in log file names)."""
    found: list[str] = []
    figures: list[float] = []
    i = 0
    while i < len(tokens):
        hit = next(
            ((pat, prod) for pat, prod in _patterns() if tuple(tokens[i : i + len(pat)]) == pat),
            None,
        )
        if hit:
            pattern, product = hit
            end = i + len(pattern)
            if (
                end < len(tokens)
                and tokens[end].isdigit()
                and int(tokens[end]) in _product_memories(product)
            ):
                figures.append(float(tokens[end]))
        else:  # glued: the model number runs on into the memory size ("a" "10040" = A100 40GB)
            hit = next(
                ((pat, prod) for pat, prod in _patterns() if _glued(tokens, i, pat, prod)), None
            )
            if not hit:
                i += 1
                continue
            pattern, product = hit
            end = i + len(pattern)
            figures.append(float(tokens[end - 1][len(pattern[-1]) :]))
        if product not in found:
            found.append(product)
        i = end
    return found, figures


def _glued(tokens: list[str], i: int, pattern: tuple[str, ...], product: str) -> bool:
    last = tokens[i + len(pattern) - 1] if i + len(pattern) <= len(tokens) else ""
    rest = last[len(pattern[-1]) :]
    return (
        pattern[-1].isdigit()
        and tuple(tokens[i : i + len(pattern) - 1]) == pattern[:-1]
        and last.startswith(pattern[-1])
        and len(rest) >= 2
        and rest[0] != "0"
        and int(rest) in _product_memories(product)
    )


def _by_memory(
    candidates: list[GpuSpec], figures: list[float]
) -> tuple[list[GpuSpec], list[float]]:
    """The candidates closest to a stated figure (within tolerance), and the figures none has."""
    best: dict[str, float] = {}
    unmatched = []
    for figure in figures:
        errors = {s.name: abs(figure - _base_memory(s)) / _base_memory(s) for s in candidates}
        if min(errors.values()) > MEMORY_TOLERANCE:
            unmatched.append(figure)
            continue
        for name, error in errors.items():
            best[name] = min(best.get(name, error), error)
    if not best:
        return candidates, unmatched
    closest = min(best.values())
    return [s for s in candidates if best.get(s.name) == closest], unmatched


def _by_form(candidates: list[GpuSpec], words: list[str]) -> tuple[list[GpuSpec], list[str]]:
    """Candidates in a stated package; explicit words first, implied ones only if none is given."""
    explicit = [FORM_WORDS[w] for w in words if w in FORM_WORDS]
    implied = [IMPLIED_FORMS[w] for w in words if w in IMPLIED_FORMS]
    for forms, loud in ((explicit, True), (implied if not explicit else [], False)):
        if not forms:
            continue
        kept = [s for s in candidates if s.form in forms]
        if kept:
            return kept, []
        return candidates, sorted(set(forms)) if loud else []
    return candidates, []


def _pick_default(candidates: list[GpuSpec]) -> GpuSpec:
    """The ambiguity rule (module docstring): the product's default variant, else one in the
    default's package, else the smaller memory, else catalog order."""
    order = list(gpu_profiles())
    default = next(
        (
            s
            for s in gpu_profiles().values()
            if s.product == candidates[0].product and s.product_default and s.mig is None
        ),
        None,
    )
    default_form = default.form if default else None
    return min(
        candidates,
        key=lambda s: (
            not s.product_default,
            s.form != default_form,
            s.memory_gib,
            order.index(s.name),
        ),
    )


def match_gpu_name(text: str) -> GpuMatch:
    """The catalog entry a GPU name names, with what was read and assumed (module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise SettingError("empty GPU name; " + HINT)
    catalog = gpu_profiles()
    try:  # an exact profile name or alias, as the catalog's own lookup reads it
        exact: GpuSpec | None = lookup(text, catalog, "GPU", "")
    except ValueError:
        exact = None
    if exact is not None:
        spec = exact
        note = f"'{text}' is the profile {spec.name} ({spec.display_name})"
        # a bare product alias ('h100', 'a100') names the default of several variants: say so
        siblings = [
            n
            for n, s in catalog.items()
            if s.product == spec.product and s.mig is None and n != spec.name
        ]
        bare = spec.product is not None and tuple(_tokens(text)) in {
            p for p, q in _patterns() if q == spec.product
        }
        if bare and spec.product_default and siblings:
            others = ", ".join(siblings)
            return GpuMatch(
                spec, f"{note}, the default {spec.product} variant; the others: {others}", True
            )
        return GpuMatch(spec, note)

    low = text.lower().replace("_", " ")
    mig = _MIG.search(low)
    profile = mig.group(1) if mig else None
    if mig:  # its "10gb" is the slice's size, not the card's
        low = low[: mig.start()] + " " + low[mig.end() :]
    low = _COUNT.sub(" ", low)
    products, figures = _find_products(_tokens(low))
    if not products:
        raise SettingError("no GPU kvplan knows in '{text}'; " + HINT, text=text)
    figures += [float(m) for m in _MEMORY.findall(low)]

    candidates = [
        s for p in products for s in catalog.values() if s.product == p and s.mig == profile
    ]
    if not candidates:
        raise SettingError(
            "'{text}': no catalog entry for MIG {profile} on {products}; " + HINT,
            text=text,
            profile=profile,
            products=" / ".join(products),
        )
    notes = []
    candidates, unmatched = _by_memory(candidates, figures)
    if unmatched:
        shown = ", ".join(f"{f:g} GB" for f in dict.fromkeys(unmatched))
        notes.append(f"ignored {shown}: no {' / '.join(products)} variant has that GPU memory")
    words = re.findall(r"[a-z0-9]+", low)
    candidates, unknown_forms = _by_form(candidates, words)
    if unknown_forms:
        notes.append(
            f"ignored form {', '.join(unknown_forms)}: not a catalog variant of "
            f"{candidates[0].product}"
        )
    if (
        len({s.product for s in candidates}) > 1
    ):  # two products named and nothing to tell them apart
        notes.append(f"read the first product named, {candidates[0].product}")
        candidates = [s for s in candidates if s.product == candidates[0].product]

    spec = candidates[0] if len(candidates) == 1 else _pick_default(candidates)
    defaulted = len(candidates) > 1
    if defaulted:
        others = ", ".join(s.name for s in candidates if s is not spec)
        missing = [
            what
            for what, given in (
                ("memory size", len(unmatched) < len(figures)),
                ("form", any(w in FORM_WORDS for w in words)),
            )
            if not given
        ]
        notes.append(
            f"the name gives no {' or '.join(missing) or 'detail'} to tell {spec.name} from "
            f"{others}: "
            f"assumed {spec.name}, "
            + (
                f"the default {spec.product} variant"
                if spec.product_default
                else f"the {spec.form} variant, as the default is"
            )
            + " (pass --gpu to choose)"
        )
    note = f"read '{text}' as {spec.name} ({spec.display_name})" + (
        "; " + "; ".join(notes) if notes else ""
    )
    return GpuMatch(spec, note, defaulted)


def read_gpu_name(text: str) -> GpuSpec:
    """The GpuSpec a GPU name names (match_gpu_name for what was assumed); ValueError if none."""
    return match_gpu_name(text).spec
