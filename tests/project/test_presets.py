"""Presets are data: every built-in one is well formed, and the environment selects them."""

from __future__ import annotations

import pytest

from playground.presets import (
    DRAFTER_LABELS,
    SERVER_DRAFTER,
    Preset,
    all_presets,
    default_preset_name,
    get_preset,
    presets,
    validate_preset,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PLAYGROUND_PRESETS", "PLAYGROUND_DEFAULT_PRESET", "PLAYGROUND_REMOTE_URL",
                 "PLAYGROUND_REMOTE_DRAFTER", "PLAYGROUND_REMOTE_K", "PLAYGROUND_REMOTE_MODEL"):
        monkeypatch.delenv(name, raising=False)


def test_every_builtin_preset_is_well_formed() -> None:
    table = all_presets()
    assert list(table)[:1] == ["smollm2-135m"]
    for name, preset in table.items():
        assert preset.name == name
        assert validate_preset(preset) == [], name
        assert set(preset.drafters) <= set(DRAFTER_LABELS)


def test_gpu_presets_say_what_they_need() -> None:
    llama, llama_vllm, kimi = get_preset("llama-3.1-8b"), get_preset("llama-3.1-8b-vllm"), get_preset("kimi-k2.6")
    assert (llama.backend, llama.device, llama.dtype, llama.gated) == ("local", "cuda", "bfloat16", True)
    assert llama.target == llama_vllm.target == "meta-llama/Llama-3.1-8B-Instruct"
    assert llama.drafters == llama_vllm.drafters == {"eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    assert "train drafter" in llama.missing_drafters["eagle3.1"]  # no public EAGLE-3.1 Llama drafter: say how
    assert llama_vllm.backend == "vllm"
    assert (kimi.backend, kimi.tensor_parallel_size, kimi.trust_remote_code) == ("vllm", 4, True)
    assert kimi.drafters == {"eagle3": "lightseekorg/kimi-k2.6-eagle3-mla",
                             "eagle3.1": "lightseekorg/kimi-k2.6-eagle3.1-mla"}
    assert all(p.requires_gpu for p in (llama, llama_vllm, kimi))
    assert not get_preset("smollm2-135m").requires_gpu


def test_remote_preset_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = get_preset("remote")
    assert remote.url is None and remote.drafters == {"served": SERVER_DRAFTER} and remote.default_drafter == "served"
    monkeypatch.setenv("PLAYGROUND_REMOTE_URL", "http://gpu-box:8000/v1")
    monkeypatch.setenv("PLAYGROUND_REMOTE_DRAFTER", "lightseekorg/kimi-k2.6-eagle3.1-mla")
    monkeypatch.setenv("PLAYGROUND_REMOTE_K", "3")
    monkeypatch.setenv("PLAYGROUND_REMOTE_API_KEY", "secret")
    remote = get_preset("remote")
    assert remote.url == "http://gpu-box:8000/v1"
    assert remote.drafters == {"served": "lightseekorg/kimi-k2.6-eagle3.1-mla"}
    assert remote.num_speculative_tokens == 3
    assert "secret" not in repr(remote)  # the key is read when connecting, never kept in a preset


def test_selection_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert list(presets()) == list(all_presets())
    assert default_preset_name() == "smollm2-135m"
    monkeypatch.setenv("PLAYGROUND_PRESETS", "llama-3.1-8b-vllm, smollm2-135m")
    assert list(presets()) == ["llama-3.1-8b-vllm", "smollm2-135m"]
    assert default_preset_name() == "smollm2-135m"
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PRESET", "llama-3.1-8b-vllm")
    assert default_preset_name() == "llama-3.1-8b-vllm"
    assert get_preset("kimi-k2.6").name == "kimi-k2.6"  # the CLI may still name any built-in preset
    monkeypatch.setenv("PLAYGROUND_PRESETS", "kimi-k2.6")
    with pytest.raises(ValueError, match="PLAYGROUND_DEFAULT_PRESET='llama-3.1-8b-vllm' is not offered"):
        default_preset_name()
    monkeypatch.delenv("PLAYGROUND_DEFAULT_PRESET")
    assert default_preset_name() == "kimi-k2.6"
    monkeypatch.setenv("PLAYGROUND_PRESETS", "smollm2-135m,gpt-5")
    with pytest.raises(ValueError, match="unknown preset.*gpt-5"):
        presets()
    with pytest.raises(KeyError, match="unknown preset 'gpt-5'"):
        get_preset("gpt-5")


@pytest.mark.parametrize("change, problem", [
    ({"backend": "tgi"}, "backend 'tgi'"),
    ({"dtype": "int8"}, "dtype 'int8'"),
    ({"tensor_parallel_size": 2}, "runs on one device"),
    ({"drafters": {"none": "x"}}, "reserved"),
    ({"drafters": {"medusa": "x"}}, "no label"),
    ({"missing_drafters": {"eagle3": "why"}}, "both as present and as missing"),
    ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"target": ""}, "target is empty"),
])
def test_validation_names_the_problem(change: dict, problem: str) -> None:
    base = dict(name="p", title="p", target="some/model", drafters={"eagle3": "some/drafter"})
    problems = validate_preset(Preset(**{**base, **change}))
    assert any(problem in p for p in problems), problems


def test_each_built_in_preset_is_filed_under_its_own_name() -> None:
    """get_preset builds the one preset it is asked for (BUILT_IN's builder by name): each must build the preset
    that name stands for."""
    from playground.presets import BUILT_IN, get_preset

    assert [get_preset(name).name for name in BUILT_IN] == list(BUILT_IN)


def test_engines_compared_read_the_same_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default reads the GGUF's 4-bit groups where they measure faster (auto); vLLM reads float32 only, so the
    pair's engine twins are its float32 presets, which give the same greedy tokens; a folder of one's own
    (PLAYGROUND_MODELS_DIR) is never quantised by default and is its own twin on our engine."""
    from playground.presets import engine_presets

    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)
    default = get_preset("smollm2-135m")
    assert default.weights == "auto" and get_preset("smollm2-135m-int4").weights == "int4"
    twins = {"local": "smollm2-135m-float32", "vllm": "smollm2-135m-vllm"}
    for name in ("smollm2-135m", "smollm2-135m-int4", "smollm2-135m-float32", "smollm2-135m-vllm"):
        assert engine_presets(get_preset(name)) == twins, name
    assert {get_preset(name).weights for name in twins.values()} == {"float32"}
    assert engine_presets(get_preset("smollm2-135m-bf16")) == {"local": "smollm2-135m-bf16"}  # no bf16 on vLLM here
    monkeypatch.setenv("PLAYGROUND_MODELS_DIR", "/nowhere/pair")
    own = get_preset("smollm2-135m")
    assert own.weights == "float32" and engine_presets(own)["local"] == "smollm2-135m"


def test_a_comparison_across_engines_runs_both_sides_on_the_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compare: two sides on our engine keep the chosen preset (the default's int4 weights); a side on each engine
    runs the pair's float32 twins on both, so greedy answers compare token for token."""
    from playground.ui.compare import on_engine

    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)  # the shipped pair, whatever another test has set

    assert on_engine("smollm2-135m", "local", "local") == "smollm2-135m"
    assert on_engine("smollm2-135m", None) == "smollm2-135m"
    assert on_engine("smollm2-135m", "local", "vllm") == "smollm2-135m-float32"
    assert on_engine("smollm2-135m", "vllm", "local") == "smollm2-135m-vllm"
    assert on_engine("smollm2-135m-float32", "local", "vllm") == "smollm2-135m-float32"
