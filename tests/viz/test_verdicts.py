"""What a comparison's verdict answers: two drafters are set against each other by speedup; one configuration on two
engines by decode rate (the question asked is which engine is faster); and a tree's verified rows are its nodes + 1.
Runs are scripted event lists: the rule is tested, not a machine's timing."""

from __future__ import annotations

from playground.engine import RunTally, StepEvent
from playground.playback import RunSettings
from playground.playback.run import Run
from playground.playback.session import Comparison
from playground.viz import RunView, comparison_verdict, engine_verdict


def scripted(step_ms: list[float], tokens_per_step: int = 2, k: int = 4) -> list[StepEvent]:
    events, elapsed = [StepEvent(step=0, drafted=[], accepted=0, emitted=[1], elapsed_ms=5.0)], 5.0
    for i, ms in enumerate(step_ms, start=1):
        elapsed += ms
        events.append(StepEvent(step=i, drafted=[7] * k, accepted=tokens_per_step - 1,
                                emitted=[2] * tokens_per_step, elapsed_ms=elapsed))
    return events


def view(events: list[StepEvent]) -> RunView:
    return RunView.from_events("EAGLE-3.1", False, 4, events)


def test_an_engine_comparison_names_the_faster_engine_only_where_the_rate_ranges_separate() -> None:
    fast, slow = view(scripted([20.0] * 40)), view(scripted([40.0] * 40))  # 100 against 50 tokens/s
    verdict = engine_verdict(slow, fast, "our engine", "vLLM")
    assert verdict.faster == "vLLM" and verdict.measured
    assert verdict.sentence.startswith("Faster engine: vLLM, 100 tok/s (100–100) against our engine's 50 tok/s")
    noisy = view(scripted([10.0] * 20 + [70.0] * 20))  # stretches at 200 and ~29 tokens/s
    close = engine_verdict(noisy, view(scripted([38.0] * 40)), "our engine", "vLLM")
    assert close.faster is None and "within noise on this machine" in close.sentence
    short = engine_verdict(view(scripted([20.0] * 2)), fast, "our engine", "vLLM")
    assert not short.measured and "too few steps" in short.sentence and "our engine" in short.sentence


def test_a_comparison_of_one_configuration_on_two_engines_gets_the_engine_verdict() -> None:
    ours = RunSettings(preset="smollm2-135m")
    theirs = RunSettings(preset="smollm2-135m-vllm")
    runs = [Run(ours, 10, events=scripted([40.0] * 40), engine="local"),
            Run(theirs, 10, events=scripted([20.0] * 40), engine="vllm")]
    comparison = Comparison("a prompt", *runs)
    assert comparison.of_engines and comparison.verdict().faster == "vLLM"
    drafters = Comparison("a prompt", Run(ours, 10, events=scripted([40.0] * 40)),
                          Run(RunSettings(preset="smollm2-135m", drafter="eagle3"), 10, events=scripted([20.0] * 40)))
    assert not drafters.of_engines and drafters.verdict().sentence.startswith("No verdict")  # speedups: no baseline


def test_a_tree_step_verifies_its_nodes_and_the_last_token() -> None:
    tree = [StepEvent(step=1, drafted=[5, 6, 7, 8], accepted=2, emitted=[5, 6, 9], tree_tokens=list(range(16)),
                      tree_parents=[-1] * 16, tree_depths=[1] * 16, tree_probs=[0.1] * 16, tree_path=[0, 1])] * 3
    chain = [StepEvent(step=1, drafted=[5, 6, 7, 8], accepted=2, emitted=[5, 6, 9])] * 3
    assert RunTally.of(tree, 4).metrics().verified_per_step == 17
    assert RunTally.of(chain, 4).metrics().verified_per_step == 5
    sentence = comparison_verdict(RunView.from_events("EAGLE-3.1", False, 4, chain),
                                  RunView.from_events("EAGLE-3.1 tree 16", False, 4, tree), False).sentence
    assert "verified tokens per step 5.00 vs 17.00" in sentence
