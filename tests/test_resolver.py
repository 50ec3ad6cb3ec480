"""The model resolver: profiles, HF ids, local folders, a fake Hugging Face cache and a
mocked Hub (no test here touches the network)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvplan.spec import hf_hub
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.resolve import _resolve, canonical, parse_query, resolve_model, strip_suffixes

LLAMA_8B = profiles_dir() / "models" / "meta-llama--Meta-Llama-3.1-8B.json"


@pytest.fixture(autouse=True)
def isolated_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache of our own, the Hub made unreachable unless a test mocks it."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_hub, "hub_unreachable", lambda endpoint: "unreachable in tests")
    _resolve.cache_clear()
    yield cache
    _resolve.cache_clear()


def fake_snapshot(
    cache: Path, repo: str, config: dict, commit: str = "abc123", ref: str | None = "main"
) -> Path:
    """huggingface_hub's layout: refs/<ref> holds the commit, snapshots/<commit>/ the files."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    blob = folder / "blobs" / "cfg"
    blob.parent.mkdir()
    blob.write_text(json.dumps(config))
    (snapshot / "config.json").symlink_to(blob)
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / ref).write_text(commit)
    return snapshot


def llama_config(**changes) -> dict:
    config = json.loads(LLAMA_8B.read_text())
    config.update(changes)
    return config


def test_profile_names_ids_and_aliases_resolve_exactly() -> None:
    for text in (
        "llama-3.1-8b",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B",
        "Llama-3.1-8B",
        "LLAMA_3.1_8B",
        "Llama 3.1 8B (user-stated)",
    ):
        resolved = resolve_model(text)
        assert (resolved.spec.name, resolved.via, resolved.note) == (
            "llama-3.1-8b",
            "profile",
            None,
        ), text


def test_an_instruct_id_matches_the_catalog_with_a_note_saying_why() -> None:
    resolved = resolve_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert resolved.via == "catalog-match" and resolved.spec.name == "mixtral-8x7b"
    assert "fine-tune, which keeps every shape" in resolved.note
    assert "mistralai/Mixtral-8x7B-Instruct-v0.1" in resolved.note
    assert (
        resolve_model("meta-llama/Llama-3.1-8B-Instruct").via == "profile"
    )  # shipped under its own id


def test_quantization_suffixes_set_the_weight_format_and_the_org_is_named() -> None:
    resolved = resolve_model("RedHatAI/gemma-4-26B-A4B-it-FP8-dynamic")
    assert resolved.spec.name == "gemma-4-26b-a4b" and resolved.weight_hint == "fp8"
    assert (
        "'RedHatAI' republishes it" in resolved.note
        and "fp8 weights, read from the name" in resolved.note
    )
    assert (
        resolve_model("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8").weight_hint
        == "int8"
    )
    assert resolve_model("Qwen/Qwen3-8B-AWQ").weight_hint == "int4"


def test_a_date_suffix_is_a_named_assumption() -> None:
    resolved = resolve_model("moonshotai/Kimi-K2-Instruct-0905")
    assert (
        resolved.spec.name == "kimi-k2-instruct" and "'-0905' dates a re-release" in resolved.note
    )


def test_suffix_stripping_and_canonical_names() -> None:
    assert canonical("Qwen2.5-7B") == canonical("qwen-2.5-7b") == "qwen-2.5-7b"
    assert canonical("Llama2-7B") == "llama-2-7b"
    assert strip_suffixes("Qwen2.5-7B-Instruct-GPTQ-Int4") == (
        "qwen-2.5-7b",
        ["gptq-int4", "instruct"],
        "int4",
    )
    assert strip_suffixes("Meta-Llama-3.1-8B-Instruct-bnb-4bit")[2] == "int4"


def test_queries_read_revisions_prose_and_foreign_paths() -> None:
    assert parse_query("Qwen/Qwen3-8B@v1.0").revision == "v1.0"
    assert parse_query("Qwen/Qwen3-14B (as 'Qwen3-14B')").repo == "Qwen/Qwen3-14B"
    assert parse_query("/cm/deepseek-coder-6.7b-instruct/").repo == "deepseek-coder-6.7b-instruct"


def test_a_model_in_the_hf_cache_resolves_by_id_and_by_bare_name(isolated_hub: Path) -> None:
    fake_snapshot(isolated_hub, "acme/Tiny-Llama-Test", llama_config(num_hidden_layers=4))
    for text in ("acme/Tiny-Llama-Test", "Tiny-Llama-Test", "acme/tiny-llama-test"):
        _resolve.cache_clear()
        resolved = resolve_model(text)
        assert resolved.via == "hf-cache" and resolved.spec.num_layers == 4, text
        assert "Hugging Face cache" in resolved.spec.source


def test_the_cache_honours_hf_home_and_revisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    cache = tmp_path / "home" / "hub"
    fake_snapshot(cache, "acme/Model-A", llama_config(num_hidden_layers=3), commit="c1")
    folder = cache / "models--acme--Model-A"
    (folder / "snapshots" / "c2").mkdir()
    (folder / "snapshots" / "c2" / "config.json").write_text(
        json.dumps(llama_config(num_hidden_layers=5))
    )
    (folder / "refs" / "v2").write_text("c2")
    assert resolve_model("acme/Model-A").spec.num_layers == 3
    assert resolve_model("acme/Model-A@v2").spec.num_layers == 5
    assert resolve_model("acme/Model-A@c2").spec.num_layers == 5


def test_safetensors_headers_give_exact_counts_without_weights(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(LLAMA_8B.read_text())
    header = json.dumps(
        {
            "a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
            "b": {"dtype": "F8_E4M3", "shape": [10], "data_offsets": [64, 74]},
            "__metadata__": {"format": "pt"},
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    resolved = resolve_model(str(folder))
    assert resolved.via == "path"
    assert resolved.checkpoint.elements_by_dtype == (("BF16", 32), ("F8_E4M3", 10))
    assert resolved.checkpoint.total_bytes == 32 * 2 + 10


def test_the_hub_is_asked_only_when_reachable_and_fills_the_cache(
    isolated_hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    calls: list[tuple] = []

    def fake_download(repo, filename, revision=None, token=None, cache_dir=None):
        calls.append((repo, filename, revision, token))
        return str(
            fake_snapshot(Path(cache_dir), repo, llama_config(num_hidden_layers=7)) / filename
        )

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(
        huggingface_hub,
        "get_safetensors_metadata",
        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no safetensors")),
    )
    monkeypatch.setattr(hf_hub, "hub_unreachable", lambda endpoint: None)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    resolved = resolve_model("acme/New-Model")
    assert resolved.via == "hub" and resolved.spec.num_layers == 7
    # an unquantized config.json: the ModelOpt sidecar is asked for too, as vLLM asks for it
    assert calls == [
        ("acme/New-Model", "config.json", None, "hf_secret"),
        ("acme/New-Model", "hf_quant_config.json", None, "hf_secret"),
    ]
    _resolve.cache_clear()
    again = resolve_model("acme/New-Model")  # now in the cache: no second download
    assert again.via == "hf-cache" and len(calls) == 2


def test_a_hub_modelopt_export_is_sized_from_its_sidecar(
    isolated_hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    def fake_download(repo, filename, revision=None, token=None, cache_dir=None):
        folder = Path(cache_dir) / ("models--" + repo.replace("/", "--"))
        snapshot = folder / "snapshots" / "abc123"
        if not snapshot.exists():
            fake_snapshot(Path(cache_dir), repo, llama_config(num_hidden_layers=7))
        if filename == "hf_quant_config.json":
            sidecar = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}
            (snapshot / filename).write_text(json.dumps(sidecar))
        return str(snapshot / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(
        huggingface_hub,
        "get_safetensors_metadata",
        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no safetensors")),
    )
    monkeypatch.setattr(hf_hub, "hub_unreachable", lambda endpoint: None)
    resolved = resolve_model("acme/New-Model-NVFP4")
    assert resolved.via == "hub" and resolved.spec.weight_dtype == "nvfp4"


def test_offline_mode_never_calls_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_hub, "hub_unreachable", lambda endpoint: None)
    monkeypatch.setattr(
        huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("network in offline mode")
    )
    with pytest.raises(ValueError) as err:
        resolve_model("acme/Unknown-Thing-9B")
    assert "HF_HUB_OFFLINE is set" in str(err.value)


def test_a_failure_lists_what_was_tried() -> None:
    with pytest.raises(ValueError) as err:
        resolve_model("acme/Nothing-Like-It-3B")
    message = str(err.value)
    for step in (
        "not a shipped profile",
        "not in the Hugging Face cache",
        "Hub lookup of acme/Nothing-Like-It-3B",
        "no catalog profile shares its name",
        "kvplan profiles models",
    ):
        assert step in message
    assert "\n" not in message


def test_a_missing_json_path_is_a_path_error() -> None:
    with pytest.raises(ValueError, match="no config.json at"):
        resolve_model("./missing/config.json")


def test_every_catalog_model_resolves_by_its_hf_id_and_estimates() -> None:
    from typer.testing import CliRunner

    from kvplan.cli.app import app
    from kvplan.spec.profiles import model_profiles

    for name, profile in model_profiles().items():
        resolved = resolve_model(profile.hf_repo)
        assert (resolved.via, resolved.spec.name) == ("profile", name), profile.hf_repo
    runner = CliRunner()
    for repo in ("meta-llama/Llama-3.1-8B", "openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V3"):
        result = runner.invoke(
            app, ["estimate", repo, "--gpu", "h200", "--tp", "8", "--json"], env={"COLUMNS": "120"}
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["model_resolution"]["via"] == "profile"


def test_shipped_benchmark_records_load_through_the_resolver(shared_data: Path) -> None:
    """Every record's model and GPU as the page writes them, through load_model / load_gpu:
    no name table. The GPU of every record resolves; a model that does not (Llama-3.3-70B:
    no verbatim config ships) fails with the steps tried, never silently."""
    from kvplan.fit.measured import dataset_run
    from kvplan.spec.resolve import load_gpu, load_model

    records = [
        json.loads(line)
        for line in (shared_data / "serving" / "serving_benchmarks.jsonl").read_text().splitlines()
        if line.strip()
    ]
    assert len(records) == 103
    unresolved = set()
    for record in records:
        load_gpu(record["gpu"])
        try:
            load_model(record["model"])
        except ValueError as err:
            assert "it is not a shipped profile" in str(err)
            unresolved.add(record["model"])
            continue
        run, why = dataset_run(record)
        assert run is not None or "unknown" not in why, (record["record_id"], why)
    assert unresolved <= {"meta-llama/Llama-3.3-70B-Instruct"}


def test_a_quantization_suffix_sizes_the_spec_every_command_loads() -> None:
    """bench, sweep and calibrate load the spec alone: the format read from the name is in it,
    sized as the same override would size it."""
    from kvplan.spec.resolve import load_model

    awq = load_model("Qwen/Qwen3-8B-AWQ")
    assert awq.weight_dtype == "int4" and awq.weight_format_name() == "int4"
    assert awq.weight_bytes() == load_model("qwen3-8b").weight_bytes("int4")
