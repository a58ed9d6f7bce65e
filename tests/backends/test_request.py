"""A request resolved once (request/check.py): checked before any choice is made, k auto's "no k pays" resolved
to plain decoding in one place, and the bench refusing an unknown drafter in the words every entry point uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground.__main__ import main
from playground.drafting import PLAIN
from playground.engine import GenerationConfig, TreeShape
from playground.engine.choice import AutoK
from playground.presets import get_preset
from playground.request import RequestError, check_run, resolve_request

PLAYGROUND = Path(__file__).resolve().parents[2] / "playground"


def chooser(k: int | None, calls: list[str]):
    def choose_k() -> AutoK:
        calls.append("chose")
        return AutoK(k, {}, "a test's choice")

    return choose_k


def test_k_auto_resolves_to_its_k_or_to_plain_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    import playground.request.check as auto_k_module

    # as if shipped: the default preset's drafters are the tests' tiny pair once a module before this one set it so
    monkeypatch.setattr(auto_k_module, "auto_k_problem", lambda preset, drafter: None)
    preset, calls = get_preset("smollm2-135m"), []
    chosen = resolve_request(preset, "eagle3.1", GenerationConfig(k=1), choose_k=chooser(3, calls))
    assert (chosen.drafter, chosen.k, chosen.auto.k) == ("eagle3.1", 3, 3) and isinstance(chosen.config.k, int)
    assert chosen.config.guard  # k auto's greedy chain is checked on its own answer (engine/guard.py)
    sampled = resolve_request(preset, "eagle3.1", GenerationConfig(k=1, temperature=0.5), choose_k=chooser(3, calls))
    assert not sampled.config.guard  # which steps draft must not move a seed's answer
    plain = resolve_request(preset, "eagle3.1", GenerationConfig(k=1), choose_k=chooser(None, calls))
    assert (plain.drafter, plain.k, plain.auto.k) == (PLAIN, 1, None)
    fixed = resolve_request(preset, "eagle3", GenerationConfig(k=5))
    assert (fixed.drafter, fixed.k, fixed.auto) == ("eagle3", 5, None)
    assert calls == ["chose", "chose", "chose"] and not fixed.config.guard and not plain.config.guard


def test_what_k_auto_cannot_choose_for_is_refused_before_the_choice_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    import playground.request.check as auto_k_module

    monkeypatch.setattr(auto_k_module, "auto_k_problem", lambda preset, drafter: None)  # as if shipped
    # the Hub target, whatever ran before (`pair_models` makes it a folder, whose fit a drafter folder is checked for)
    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)
    preset, calls = get_preset("smollm2-135m"), []
    refusals = {
        "unknown drafter 'medusa'": ("medusa", GenerationConfig(k=1), None),
        "k auto chooses a chain's k": ("eagle3.1", GenerationConfig(k=1, tree=TreeShape.k_deep(1, 8)), None),
        "asks k auto to choose the method": ("auto", GenerationConfig(k=1), None),
        "k auto cannot choose medusa on smollm2-135m": ("eagle3.1,medusa", GenerationConfig(k=1), None),
        "may choose a weightless method": ("auto", GenerationConfig(k=1, min_draft_prob=0.2), None),
        "k auto chooses k for a preset drafter": ("eagle3.1", GenerationConfig(k=1), "/a/drafter/folder"),
    }
    for words, (drafter, cfg, drafter_path) in refusals.items():
        with pytest.raises(RequestError, match=re.escape(words)):
            choose_k = None if words.startswith("asks k auto") else chooser(4, calls)
            resolve_request(preset, drafter, cfg, drafter_path, choose_k)
    assert calls == []  # no choice (no model work) for a refused request


def test_a_choice_among_methods_resolves_to_the_method_chosen_with_its_own_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` (or a comma list) with k auto: the request runs the method and k chosen, with that method's settings
    alone; plain decoding where none pays."""
    import playground.request.check as auto_k_module

    monkeypatch.setattr(auto_k_module, "auto_k_problem", lambda preset, drafter: None)  # as if shipped
    preset = get_preset("smollm2-135m")
    cfg = GenerationConfig(k=1, method_settings=(("prompt_lookup_max", 3), ("suffix_decoding_max_tree_depth", 8)))
    for drafter in ("auto", "eagle3.1,ngram"):
        chosen = resolve_request(preset, drafter, cfg, choose_k=lambda: AutoK(4, {4: 2.0}, "why", method="ngram"))
        assert (chosen.drafter, chosen.k, chosen.config.method_settings) == ("ngram", 4, (("prompt_lookup_max", 3),))
    plain = resolve_request(preset, "auto", cfg, choose_k=lambda: AutoK(None, {}, "why"))
    assert (plain.drafter, plain.k, plain.config.method_settings) == (PLAIN, 1, ())


def test_no_k_pays_is_resolved_to_plain_decoding_in_one_place() -> None:
    sites = [f"{path.relative_to(PLAYGROUND)}:{n}" for path in PLAYGROUND.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"auto\.k is not None", line)]
    assert sites == ["request/check.py:" + sites[0].split(":")[1]] and len(sites) == 1, sites


def _error_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) != 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    return line.removeprefix("error: ")


def test_the_bench_refuses_an_unknown_drafter_in_the_same_sentence_as_generate_and_the_request_check(
        pair_models: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(RequestError) as refused:
        check_run(get_preset("smollm2-135m"), "medusa", GenerationConfig())
    sentence = str(refused.value)
    assert sentence.startswith("unknown drafter 'medusa'")
    assert _error_line(capsys, ["generate", "--prompt", "hi", "--drafter", "medusa"]) == sentence
    assert _error_line(capsys, ["bench", "--profile", "smoke", "--drafters", "none,medusa"]) == sentence
