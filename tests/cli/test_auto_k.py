"""`generate --k auto`: the k predicted fastest from the drafter's acceptance by position and this machine's step
costs, plain decoding where nothing pays (an untrained drafter), and the record saying what it chose and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.engine.choice import choose_k
from playground.engine.costs import Cost, CostProfile


def flat(ms: float) -> Cost:
    return Cost(ms, ms, ms)


PROFILE = CostProfile({}, "t", "d", 64, flat(30), {r: flat(30 + 2 * r) for r in (1, 2, 3, 5, 9)},
                      {k: flat(3 * k) for k in range(1, 9)})


def test_the_choice_is_the_best_predicted_k_or_plain() -> None:
    """With 30 ms plain steps, verification 30 + 2r ms and drafting 3 ms a token: acceptance falling by position
    makes k = 4 best here (its prediction is worked by hand below); near-zero acceptance makes none pay."""
    good = [0.9, 0.8, 0.6, 0.5, 0.2, 0.1, 0.05, 0.02]
    choice = choose_k(PROFILE, good, "a test")
    assert choice.k == 4
    assert choice.predicted[4] == pytest.approx((1 + 0.9 + 0.8 + 0.6 + 0.5) * 30 / (12 + 40))
    assert choice.predicted[4] == max(choice.predicted.values()) and "k=4 is predicted fastest" in choice.why
    untrained = choose_k(PROFILE, [0.02] * 8, "a test")
    assert untrained.k is None and "plain decoding" in untrained.why
    barely = choose_k(PROFILE, [0.25, 0.01], "a test")  # k = 1: 1.25 * 30 / 37 = 1.01x, inside the 5 % margin
    assert barely.k is None


def test_the_choice_names_the_step_costs_it_read() -> None:
    """Which load the step costs were measured under, and when: 'just now' where measured for this choice."""
    import dataclasses
    import time

    good = [0.9, 0.8, 0.6, 0.5]
    idle = dataclasses.replace(PROFILE, busy_share=0.02, measured_at=time.time() - 600)
    choice = choose_k(idle, good, "a test", since=time.time() - 5)
    assert choice.costs == "step costs measured on an idle machine, 10 min ago"
    assert choice.costs in choice.why and choice.short().endswith(f"on this machine ({choice.costs})")
    assert choice.to_dict()["step_costs"] == choice.costs
    busy = dataclasses.replace(PROFILE, busy_share=0.8, measured_at=time.time())
    assert choose_k(busy, good, "a test", since=time.time() - 5).costs == (
        "step costs measured on a busy machine (another task runnable at 80% of its timed calls), just now")
    assert "whose load was not read" in choose_k(PROFILE, good, "a test").costs


def test_generate_k_auto_falls_back_to_plain_for_an_untrained_drafter(capsys, pair_models: Path, tmp_path: Path,
                                                                       monkeypatch) -> None:
    from playground.__main__ import main

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    evaluation = pair_models / "evaluation.json"  # beside the drafter folders, as `train evaluate` writes it
    evaluation.write_text(json.dumps({"acceptance": {"eagle3.1": {"8": {"per_position_acceptance": [0.01] * 8}}}}))
    try:
        code = main(["generate", "--prompt", "Hello there", "--max-new-tokens", "12", "--drafter", "eagle3.1", "--k",
                     "auto", "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        record = json.loads(out.out)
        assert record["drafter"] == "none" and record["auto_k"]["k"] is None
        assert "plain decoding" in record["auto_k"]["why"] and "--k auto:" in out.err
        assert set(record["auto_k"]["predicted_speedup"]) == {str(k) for k in range(1, 9)}
        evaluation.unlink()
        code = main(["generate", "--prompt", "Hello there", "--drafter", "eagle3.1", "--k", "auto"])
        assert code != 0 and "needs eagle3.1's acceptance by position" in capsys.readouterr().err
    finally:
        evaluation.unlink(missing_ok=True)


def test_k_takes_a_number_or_auto(capsys, pair_models: Path) -> None:
    from playground.__main__ import main

    with pytest.raises(SystemExit) as refused:
        main(["generate", "--prompt", "Hello there", "--k", "four"])
    assert refused.value.code == 2
    assert "argument --k: a whole number from 1 to 16 or auto, got 'four'" in capsys.readouterr().err


def test_a_weightless_step_is_priced_at_its_verification_alone() -> None:
    """(rows verified, tokens emitted): 6 tokens at 30 ms plain over verifying 5 rows (40 ms) and 1 row (32 ms)."""
    assert PROFILE.verified_speedup([(5, 5), (1, 1)])[0] == pytest.approx(6 * 30 / (40 + 32))
    assert PROFILE.verified_speedup([]) == (1.0, 1.0, 1.0)


def test_text_steps_follow_a_greedy_run_over_the_text() -> None:
    """Prompt lookup over an answer that copies its prompt accepts whole proposals; over new text it proposes
    nothing, and each step is a plain one (one row, one token)."""
    from playground.auto_k import text_steps

    prompt = list(range(100, 140))
    # the answer's first two tokens: the context's last two never occurred before (n from 5 down to 2); then each
    # step's 4 proposals and the target's token, the last step cut where the text ends
    assert text_steps("ngram", 4, prompt + prompt[:20], len(prompt)) == [(1, 1), (1, 1), (5, 5), (5, 5), (5, 5),
                                                                          (5, 4)]
    assert text_steps("ngram", 4, prompt + list(range(200, 220)), len(prompt)) == [(1, 1)] * 20
    # the request's own settings, not the registry's: matching three tokens at least, the copy starts a step later
    assert text_steps("ngram", 4, prompt + prompt[:20], len(prompt), (("prompt_lookup_min", 3),)) == [
        (1, 1), (1, 1), (1, 1), (5, 5), (5, 5), (5, 5), (5, 3)]
    # another method's settings are not prompt lookup's
    assert text_steps("ngram", 4, prompt + prompt[:20], len(prompt), (("suffix_decoding_max_tree_depth", 4),)) == \
        text_steps("ngram", 4, prompt + prompt[:20], len(prompt))


def test_k_auto_among_methods_chooses_the_fastest_that_pays_and_says_each() -> None:
    from playground.engine.choice import Candidate, choose_method

    eagle = Candidate("eagle3.1", {2: (1.8, 1.5, 2.0), 4: (1.6, 1.2, 1.9)}, "a file", 30.0, (0.7, 0.5))
    lookup = Candidate("ngram", {2: (1.4, 1.1, 1.6), 4: (2.6, 0.9, 3.0)}, "a replay", 30.0)
    choice = choose_method([eagle, lookup], "some costs")
    # ngram's 2.6x at k=4 has its range below 1x: not a speedup; EAGLE-3.1's 1.8x at k=2 is
    assert (choice.method, choice.k, choice.predicted) == ("eagle3.1", 2, {2: 1.8, 4: 1.6})
    assert choice.why.startswith("EAGLE-3.1 at k=2 is predicted fastest on this machine (EAGLE-3.1 k=2 1.80x "
                                 "(1.50-2.00), ~60 tok/s, acceptance from a file; prompt lookup (n-gram) k=4 2.60x")
    assert choice.short().startswith("k auto chose EAGLE-3.1 at k=2, predicted 1.80×")
    assert choice.to_dict()["method"] == "eagle3.1" and set(choice.to_dict()["predicted_by_method"]) == {
        "eagle3.1", "ngram"}
    nothing = choose_method([Candidate("ngram", {1: (1.02, 0.9, 1.1)}, "a replay", 30.0)], "some costs")
    assert nothing.k is None and nothing.method is None and "no method and k is predicted" in nothing.why
    assert nothing.short().startswith("k auto chose plain decoding: no method and k")
