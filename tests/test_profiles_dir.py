"""The profiles folder is found from an installed package and from a bare source tree."""

from __future__ import annotations

from importlib import resources

import pytest

from kvplan.spec import profiles


def test_a_source_tree_never_installed_finds_the_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(name: str) -> None:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(resources, "files", not_installed)
    folder = profiles.profiles_dir()
    assert (folder / "models" / "index.toml").is_file()
    assert (folder / "gpus.toml").is_file()
