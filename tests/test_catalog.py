"""The shipped model catalog: size, integrity of the index, and hand-derived KV sizes."""

from __future__ import annotations

import json

import pytest

from kvplan.spec import parse_kv_format
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.profiles import _normalize, model_profiles, profiles_dir
from kvplan.spec.resolve import load_model


def test_at_least_sixty_profiles_ship() -> None:
    assert len(model_profiles()) >= 60


def test_every_profile_file_exists_is_json_and_parses() -> None:
    for name, profile in model_profiles().items():
        assert profile.path.is_file(), f"{name}: {profile.file} is missing"
        assert isinstance(json.loads(profile.path.read_text()), dict), name
        model = load_model(name)
        assert model.params.total > 0, name
        assert model.kv_bytes_per_token(parse_kv_format("bf16")) > 0, name


def test_every_json_in_the_folder_is_indexed() -> None:
    profiles = model_profiles().values()
    indexed = {p.file for p in profiles} | {p.quant_file for p in profiles if p.quant_file}
    on_disk = {p.name for p in (profiles_dir() / "models").glob("*.json")}
    assert on_disk == indexed, (sorted(on_disk - indexed), sorted(indexed - on_disk))


def test_hf_repos_and_files_are_unique() -> None:
    profiles = list(model_profiles().values())
    repos = [p.hf_repo for p in profiles]
    # one config may serve a base model and its ModelOpt export, told apart by the export's
    # quantization sidecar
    files = [(p.file, p.quant_file) for p in profiles]
    assert len(repos) == len(set(repos)), sorted(r for r in repos if repos.count(r) > 1)
    assert len(files) == len(set(files)), sorted(f for f in files if files.count(f) > 1)


def test_no_lookup_key_names_two_profiles() -> None:
    """A name, alias, HF id or HF id tail must resolve to one profile: otherwise the later
    entry silently shadows the earlier one."""
    owner: dict[str, str] = {}
    for name, profile in model_profiles().items():
        keys = {name, *profile.aliases, profile.hf_repo, profile.hf_repo.split("/")[-1]}
        for key in {_normalize(k) for k in keys}:
            assert owner.setdefault(key, name) == name, (key, owner[key], name)


def test_every_profile_names_a_source() -> None:
    for name, profile in model_profiles().items():
        assert profile.source.strip(), name


# layers x 2 (K and V) x KV heads x head_dim x 2 bytes (bf16), read off each config by hand.
HAND_DERIVED_BF16_KV_BYTES_PER_TOKEN = {
    "llama-3.1-70b-instruct": 80 * 2 * 8 * 128 * 2,  # 8192 / 64 heads = 128
    "qwen3-1.7b": 28 * 2 * 8 * 128 * 2,  # head_dim 128 given
    "qwen3-235b-a22b": 94 * 2 * 4 * 128 * 2,
    "qwen2.5-1.5b": 28 * 2 * 2 * 128 * 2,  # 1536 / 12 heads = 128
    "opt-6.7b": 32 * 2 * 32 * 128 * 2,  # MHA: 4096 / 32 heads
    "vicuna-13b-v1.3": 40 * 2 * 40 * 128 * 2,  # LLaMA-1 MHA: 5120 / 40 heads
    "phi-1": 24 * 2 * 32 * 64 * 2,  # 2048 / 32 heads = 64
    "qwen3-coder-480b-a35b-instruct": 62 * 2 * 8 * 128 * 2,  # head_dim 128 given
    "qwen3-coder-30b-a3b-instruct": 48 * 2 * 4 * 128 * 2,
    "phi-3-medium-4k": 40 * 2 * 10 * 128 * 2,  # 5120 / 40 heads = 128; sliding_window 2047
    "phi-3-medium-128k": 40 * 2 * 10 * 128 * 2,  # same shapes, su rope
    "phi-2": 32 * 2 * 32 * 80 * 2,  # MHA: 2560 / 32 heads = 80
    "llama-3-8b": 32 * 2 * 8 * 128 * 2,  # 4096 / 32 heads = 128; GQA 8 KV heads = 131072
    "meta-llama/Meta-Llama-3-8B-Instruct": 32 * 2 * 8 * 128 * 2,  # the alias: same profile, 131072
    "qwen2-7b-instruct": 28 * 2 * 4 * 128 * 2,  # 3584 / 28 heads = 128; 4 KV heads = 57344
    "deepseek-coder-6.7b-instruct": 32 * 2 * 32 * 128 * 2,  # MHA: 4096 / 32 heads = 128; 524288
    "qwen1.5-4b-chat": 40 * 2 * 20 * 128 * 2,  # MHA: 2560 / 20 heads = 128; 409600
    "qwen2-72b-instruct": 80 * 2 * 8 * 128 * 2,  # 8192 / 64 heads = 128; 327680
    "qwen3-4b": 36 * 2 * 8 * 128 * 2,  # head_dim 128 given (32 heads x 128 != 2560); 147456
    "llama-2-70b": 80 * 2 * 8 * 128 * 2,  # 8192 / 64 heads = 128; GQA 8 KV heads = 327680
    "qwen3-next-80b-a3b-thinking": 12
    * 2
    * 2
    * 256
    * 2,  # full attention in 48 / 4 = 12 layers; head_dim 256
    # Gemma3TextConfig defaults (4 KV heads, head_dim 256) over 34 layers, 5 global + 29 sliding;
    # 139264
    "gemma-3-4b": 34 * 2 * 4 * 256 * 2,
    "exaone-4.0-32b": 64
    * 2
    * 8
    * 128
    * 2,  # 16 full + 48 sliding ("LLLG"), head_dim 128 given; 262144
    "nemotron-h-56b-base-8k": 10 * 2 * 8 * 128 * 2,  # only the 10 '*' layers of 118 keep KV; 40960
    "nemotron-3-nano-30b-a3b": 6 * 2 * 2 * 128 * 2,  # 6 '*' layers, 2 KV heads, head_dim 128; 6144
    "llama-3.3-nemotron-super-49b": 49
    * 2
    * 8
    * 128
    * 2,  # 49 of 80 layers attend, 64 / 8 = 8 KV heads; 200704
    "llama-3.2-90b-vision-instruct": 80
    * 2
    * 8
    * 128
    * 2,  # 100 layers less 20 cross-attention; 327680
}


@pytest.mark.parametrize(("name", "expected"), sorted(HAND_DERIVED_BF16_KV_BYTES_PER_TOKEN.items()))
def test_kv_bytes_per_token_matches_hand_derivation(name: str, expected: int) -> None:
    assert load_model(name).kv_bytes_per_token(parse_kv_format("bf16")) == expected


@pytest.mark.parametrize("name", ["qwen3-coder-480b-a35b-instruct", "qwen3-coder-30b-a3b-instruct"])
def test_shared_expert_intermediate_size_zero_means_no_shared_expert(name: str) -> None:
    """Qwen3-Coder ships shared_expert_intermediate_size 0: valid, and it adds no parameters
    (the count equals the one for the same config without the field)."""
    cfg = json.loads(model_profiles()[name].path.read_text())
    assert cfg["shared_expert_intermediate_size"] == 0
    without = {k: v for k, v in cfg.items() if k != "shared_expert_intermediate_size"}
    assert load_model(name).params == model_spec_from_config(without, name, "test").params


def test_negative_shared_expert_intermediate_size_is_refused() -> None:
    cfg = json.loads(model_profiles()["qwen3-coder-30b-a3b-instruct"].path.read_text())
    with pytest.raises(ValueError, match="shared_expert_intermediate_size"):
        model_spec_from_config({**cfg, "shared_expert_intermediate_size": -1}, "bad", "test")
