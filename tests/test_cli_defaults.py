"""Each default is declared once: `kvplan bench`'s options show the defaults of the config
fields they set, read from those fields; a sweep point that leaves a setting out runs what
bench runs with the option left out; no module of the bench or sweep command writes a
setting's default a second time (a literal there would drift from the config's); and no other
command writes bench's default for a setting it shares (estimate, plan, calibrate, profile
read it from the config; a default of their own, such as estimate's H100, is theirs)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

from kvplan.bench.config import BenchConfig, flat_settings
from kvplan.bench.workloads import WorkloadSpec
from kvplan.cli.bench import bench, bench_config
from kvplan.cli.panels.cluster import ClusterOptions
from kvplan.cli.panels.engine import EngineOptions
from kvplan.cli.panels.hardware import HardwareOptions
from kvplan.cli.panels.kv import KvOptions
from kvplan.cli.panels.output import OutputOptions
from kvplan.cli.panels.real import RealOptions
from kvplan.cli.panels.tiers import TierOptions
from kvplan.cli.panels.workload import WorkloadOptions
from kvplan.core.engine_factory import SizingConfig

CLI = Path(__file__).resolve().parents[1] / "kvplan" / "cli"
# The modules that declare `kvplan bench`'s and `kvplan sweep`'s options
SCANNED = [
    CLI / "bench.py",
    CLI / "sweep.py",
    CLI / "common.py",
    *sorted((CLI / "panels").glob("*.py")),
]
# Options named otherwise than the setting they set
ALIASES = {"no_chunked_prefill": "chunked_prefill", "router": "routers"}


def _setting_defaults() -> dict[str, Any]:
    """Every setting's default under its flat name (sweep files', results files')."""
    run = BenchConfig()
    groups = (SizingConfig(), run.scheduler, run.cluster, run.tiers, run.real)
    defaults = {
        field.name: getattr(group, field.name)
        for group in groups
        for field in dataclasses.fields(group)
    }
    defaults.update(
        {
            field.name: getattr(run, field.name)
            for field in dataclasses.fields(run)
            if not dataclasses.is_dataclass(getattr(run, field.name))
        }
    )
    stream = WorkloadSpec()
    defaults.update(
        {field.name: getattr(stream, field.name) for field in dataclasses.fields(stream)}
    )
    defaults["workload"] = defaults.pop("kind")  # the sweep file's and the option's name
    return defaults


SETTINGS = _setting_defaults()


def test_every_option_that_sets_a_setting_shows_its_default() -> None:
    options = inspect.signature(bench).parameters
    bound = [name for name in options if ALIASES.get(name, name) in SETTINGS]
    assert len(bound) >= 40, bound  # nearly every option sets a config field
    for name in bound:
        default = options[name].default
        expected = SETTINGS[ALIASES.get(name, name)]
        if name == "no_chunked_prefill":
            expected = not expected
        elif name == "router":  # every router is compared; a single pod runs none
            assert bench_config(_default_panels()).cluster.routers == expected
            continue
        assert default == expected, (name, default, expected)
    assert options["swap_space_gib"].default == 4.0 and options["engine"].default == "vllm"


def _default_panels() -> tuple[Any, ...]:
    return (
        HardwareOptions(),
        KvOptions(),
        WorkloadOptions(),
        ClusterOptions(),
        EngineOptions(),
        OutputOptions(),
        RealOptions(),
        TierOptions(),
    )


def test_a_sweep_point_without_settings_runs_what_bench_runs_without_options() -> None:
    from_options = bench_config(_default_panels())  # type: ignore[arg-type]
    from_sweep = BenchConfig.from_flat()  # what a sweep point that sets nothing gets
    assert from_options == from_sweep == BenchConfig()
    assert flat_settings(from_options) == flat_settings(from_sweep)
    assert (
        flat_settings(from_options)["swap_space_gib"] == 0.0
    )  # recompute preemption sets no area aside
    assert WorkloadOptions().spec() == WorkloadSpec()


def test_swap_preemption_gets_the_swap_area_in_bench_and_sweeps() -> None:
    from kvplan.core.scheduler import SchedulerConfig

    swap = SchedulerConfig(max_num_seqs=None, max_num_batched_tokens=None, preemption="swap")
    assert BenchConfig.from_flat(scheduler=swap).sizing.swap_space_gib == 4.0
    options = dataclasses.replace(EngineOptions(), preemption="swap")
    panels = (*_default_panels()[:4], options, *_default_panels()[5:])
    assert bench_config(panels).sizing.swap_space_gib == 4.0  # type: ignore[arg-type]


def _literal(node: ast.expr | None) -> bool:
    """A value written out (42, "lru", None, -1, (1, 2)) rather than read from somewhere."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal(item) for item in node.elts)
    return False


def _declared_defaults(path: Path) -> list[tuple[str, int, ast.expr | None]]:
    """(name, line, default) of every parameter default and every class field in the module."""
    found: list[tuple[str, int, ast.expr | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            positional = [*arguments.posonlyargs, *arguments.args]
            found += [
                (arg.arg, arg.lineno, default)
                for arg, default in zip(
                    positional[len(positional) - len(arguments.defaults) :], arguments.defaults
                )
            ]
            found += [
                (arg.arg, arg.lineno, default)
                for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults)
                if default is not None
            ]
        elif isinstance(node, ast.ClassDef):
            found += [
                (item.target.id, item.lineno, item.value)
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.value is not None
            ]
    return found


def test_no_cli_module_writes_a_settings_default_again() -> None:
    twice = [
        f"{path.relative_to(CLI.parent.parent)}:{line}: {name}"
        for path in SCANNED
        for name, line, default in _declared_defaults(path)
        if ALIASES.get(name, name) in SETTINGS and _literal(default)
    ]
    assert twice == [], "read these defaults from the config field instead: " + "; ".join(twice)


def test_the_scan_sees_a_second_declaration(tmp_path: Path) -> None:
    module = tmp_path / "options.py"
    module.write_text(
        "from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\nclass Options:\n"
        "    block_size: int = 16\n    cpu_cache_gb: float = DEFAULTS.cpu_cache_gb\n\n\n"
        "def command(rate: float = 3.0, *, preemption: str = 'recompute', out: str = 'x') -> "
        "None:\n"
        "    pass\n"
    )
    literal = [
        name
        for name, _, default in _declared_defaults(module)
        if name in SETTINGS and _literal(default)
    ]
    assert literal == ["block_size", "rate", "preemption"]


def test_no_other_command_writes_a_shared_default_again() -> None:
    import ast

    others = [path for path in sorted(CLI.glob("*.py")) if path not in SCANNED]
    again = [
        f"{path.relative_to(CLI.parent.parent)}:{line}: {name}"
        for path in others
        for name, line, default in _declared_defaults(path)
        if ALIASES.get(name, name) in SETTINGS
        and _literal(default)
        and not (isinstance(default, ast.Constant) and default.value is None)
        and ast.literal_eval(default) == SETTINGS[ALIASES.get(name, name)]
    ]
    assert again == [], "read these from the config field instead: " + "; ".join(again)
