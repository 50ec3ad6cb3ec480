"""Library errors name settings (config fields), the command line words them as its flags:
the template, its values, pickling, and that every setting a library error names is worded
as a flag some kvplan command has."""

from __future__ import annotations

import ast
import pickle
import string
from pathlib import Path
from typing import Any

import pytest
import typer.core
import typer.main

from kvplan.cli.app import app
from kvplan.cli.common import error_message, flag_of
from kvplan.spec.setting_error import SettingError

KVPLAN = Path(__file__).resolve().parents[1] / "kvplan"
# Flags of vLLM's that a library error names for settings read from a vLLM run or log
VLLM_FLAGS = {"--num-prompts", "--num-scheduler-steps"}


def test_settings_are_named_values_are_filled() -> None:
    err = SettingError("{max_num_seqs} must be at least 1, got {got:,}; {kv_budget} too", got=1000)
    assert str(err) == "max_num_seqs must be at least 1, got 1,000; kv_budget too"
    assert err.settings == ("max_num_seqs", "kv_budget") and err.setting == "max_num_seqs"
    assert error_message(err) == "--max-num-seqs must be at least 1, got 1,000; --kv-budget too"
    assert isinstance(err, ValueError)


def test_user_text_is_a_value_so_its_braces_stay_text() -> None:
    err = SettingError("{params} '{pair}' needs NAME=VALUE", pair="{oops}")
    assert error_message(err) == "--workload-param '{oops}' needs NAME=VALUE"
    where = err.within("run {7}: ")
    assert str(where) == "run {7}: params '{oops}' needs NAME=VALUE" and where.setting == "params"


def test_pickled_errors_keep_their_settings() -> None:  # workers send errors across processes
    err = pickle.loads(
        pickle.dumps(SettingError("{rate} inf goes with {workload} random, not {kind}", kind="{x}"))
    )
    assert error_message(err) == "--rate inf goes with --workload random, not {x}"


def test_a_template_must_name_a_setting() -> None:
    with pytest.raises(TypeError):
        SettingError("nothing named, only {value}", value=1)


def test_the_flag_of_a_setting() -> None:
    assert flag_of("max_num_batched_tokens") == "--max-num-batched-tokens"
    assert flag_of("vllm_figures") == "--format vllm" and flag_of("params") == "--workload-param"


def _flags(group: Any) -> set[str]:
    """Every --flag of every command under a typer group."""
    found: set[str] = set()
    for command in group.commands.values():
        if isinstance(command, typer.core.TyperGroup):
            found |= _flags(command)
        else:
            found |= {opt for param in command.params for opt in param.opts if opt.startswith("--")}
    return found


def _named_settings() -> dict[str, str]:
    """Every setting a SettingError template written in the library names -> where."""
    named = {}
    for path in KVPLAN.rglob("*.py"):
        if path.relative_to(KVPLAN).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "SettingError"
                and node.args
            ):
                continue
            values = {keyword.arg for keyword in node.keywords}
            template = node.args[0]
            if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
                continue  # built at run time (spec/numbers.py): its callers' tests check it
            for _, name, _, _ in string.Formatter().parse(template.value):
                if name and name not in values and not name.startswith("_"):
                    named[name] = f"{path.relative_to(KVPLAN)}:{node.lineno}"
    return named


def test_every_setting_a_library_error_names_is_a_flag_of_a_command() -> None:
    flags = _flags(typer.main.get_command(app)) | VLLM_FLAGS
    named = _named_settings()
    assert {"max_num_seqs", "pods", "max_model_len", "engine"} <= set(
        named
    )  # the scan finds the library's errors
    unknown = {
        setting: where
        for setting, where in named.items()
        if flag_of(setting).split()[0] not in flags
    }
    assert unknown == {}, "map these settings to their flag in kvplan/cli/common.py FLAGS"
