"""Findings in words: plain-language statements generated from the measured bench rows, whichever way the numbers
come out — never written by hand. Also the row selections the report's figures share (`pairs`, `study_rows`,
`deepest_pairs`)."""

from __future__ import annotations

import statistics
from collections import defaultdict

from playground.bench.figures import condition, method_name, speedup_range, speedup_range_text
from playground.bench.rows import BenchRow
from playground.viz.verdict import ranges_overlap

STUDIES = ("k", "context", "template")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ratio_words(ratio: float) -> str:
    if abs(ratio - 1) < 0.005:
        return f"{ratio:.2f}× (no difference)"
    return f"{ratio:.2f}× ({'longer' if ratio > 1 else 'shorter'})"


def fixed_k_eagle_rows(rows: list[BenchRow]) -> list[BenchRow]:
    """EAGLE rows with an acceptance length at a fixed k: what the by-k findings and figures read (a k auto row is
    set against them in a finding of its own)."""
    return [r for r in rows if r.kind == "eagle" and r.mean_acceptance_length is not None and not r.k_auto]


def pairs(rows: list[BenchRow]) -> list[tuple[BenchRow, BenchRow]]:
    """(EAGLE-3 row, EAGLE-3.1 row) of chains measured on the same prompt set, template and k (trees have their own
    finding, against their chain: `_tree_findings`)."""
    groups: dict[tuple, dict[str, list[BenchRow]]] = defaultdict(lambda: defaultdict(list))
    for r in fixed_k_eagle_rows(rows):
        if r.tree_nodes is None:
            groups[(r.prompt_set, r.template, r.k)][r.variant].append(r)
    return [(g["EAGLE-3"][0], g["EAGLE-3.1"][0]) for g in groups.values()
            if len(g["EAGLE-3"]) == 1 and len(g["EAGLE-3.1"]) == 1]


def _al_ratio(pair: tuple[BenchRow, BenchRow]) -> float:
    return pair[1].mean_acceptance_length / pair[0].mean_acceptance_length


def _lossless_findings(rows: list[BenchRow], greedy: bool) -> list[str]:
    if not greedy:
        return [("Outputs were sampled (temperature > 0), so they are not compared token by token with plain "
                 "decoding; only greedy runs have a lossless check.")]
    checked = [r for r in rows if r.lossless is not None]
    broken = [r for r in checked if not r.lossless]
    if not broken:
        return [(f"Lossless: the greedy output of all {len(checked)} measured configurations was token-identical "
                 "to plain decoding on every prompt.")]
    return [f"NOT lossless: {method_name(r)} on {condition(r)} differed from plain decoding on "
            f"{len(r.mismatched_prompts)} of {r.prompts} prompts ({', '.join(r.mismatched_prompts[:5])})."
            for r in broken]


def _spread_words(r: BenchRow) -> str:
    spread = speedup_range_text(r)
    if spread is None:
        return "one pass, so no spread was measured: indicative only"
    return f"median of {len(r.speedup_runs)} passes, which ranged {spread}×"


def _speed_findings(rows: list[BenchRow]) -> list[str]:
    out = []
    by_condition: dict[str, list[BenchRow]] = defaultdict(list)
    for r in rows:
        if r.tokens_per_second is not None:
            by_condition[condition(r)].append(r)
    for cond, group in by_condition.items():
        ranked = sorted(group, key=lambda r: r.tokens_per_second, reverse=True)
        best = ranked[0]
        finding = (f"On {cond}, the fastest method was {method_name(best)} at {best.tokens_per_second:.1f} "
                   f"tokens/s: {best.speedup:.2f}× plain decoding ({best.baseline_tokens_per_second:.1f} "
                   f"tokens/s, same run, same prompts; {_spread_words(best)}).")
        close = [r for r in ranked[1:] if _overlap(best, r)]
        if close:
            finding += (" Within noise of " + ", ".join(f"{method_name(r)} ({r.speedup:.2f}×, {_spread_words(r)})"
                                                        for r in close) + ": the passes do not separate them.")
        out.append(finding)
        ours, peers = ours_and_peers(group)
        for row in ours if peers else []:
            ratios = ", ".join(f"{row.tokens_per_second / p.tokens_per_second:.2f}× {method_name(p)}"
                               for p in peers)
            out.append(f"{method_name(row)} (its fastest k) ran at {ratios} (tokens/s ratios).")
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r.note and r.label not in notes[(condition(r), r.note)]:
            notes[(condition(r), r.note)].append(r.label)
    return out + [f"Not measured on {cond} ({', '.join(labels)}): {note}." for (cond, note), labels in notes.items()]


def _overlap(a: BenchRow, b: BenchRow) -> bool:
    ra, rb = speedup_range(a), speedup_range(b)
    return ra is not None and rb is not None and ranges_overlap(ra, rb)


SPECULATING = ("eagle", "weightless")  # the row kinds our own loop drafts for: EAGLE drafters, weightless methods


def ours_and_peers(rows: list[BenchRow]) -> tuple[list[BenchRow], list[BenchRow]]:
    """The fastest k of each of our drafting methods (EAGLE drafters, weightless methods) and of each peer among
    measured rows of one condition."""
    measured = [r for r in rows if r.tokens_per_second is not None]
    return (_best_per_label([r for r in measured if r.kind in SPECULATING]),
            _best_per_label([r for r in measured if r.kind == "peer"]))


def _method_findings(rows: list[BenchRow]) -> list[str]:
    """Every drafting method (each at its fastest k) ranked on each prompt set and template, with its acceptance
    length; then where each method was the fastest. Any number of methods: none is assumed."""
    by_condition: dict[str, list[BenchRow]] = defaultdict(list)
    for r in rows:
        if r.kind in (*SPECULATING, "peer") and r.tokens_per_second is not None and r.speedup is not None:
            by_condition[condition(r)].append(r)
    out, wins = [], defaultdict(list)
    for cond, group in by_condition.items():
        ranked = sorted(_best_per_label(group), key=lambda r: r.tokens_per_second, reverse=True)
        wins[method_name(ranked[0]) if ranked[0].speedup > 1 else "plain decoding (no method beat it)"].append(cond)
        if len(ranked) > 1:
            out.append(f"On {cond}, by method at its fastest k: " + "; ".join(map(_method_words, ranked)) + ".")
    if len(by_condition) > 1 or len(wins) > 1:
        out.append("Where each method was fastest: " + "; ".join(
            f"{name} on {', '.join(conds)}" for name, conds in wins.items()) + ".")
    return out


def _method_words(r: BenchRow) -> str:
    acceptance = (f", mean acceptance length {r.mean_acceptance_length:.2f}" if r.mean_acceptance_length is not None
                  else "")
    return f"{method_name(r)} {r.speedup:.2f}× plain decoding{acceptance}"


def _best_per_label(rows: list[BenchRow]) -> list[BenchRow]:
    best: dict[str, BenchRow] = {}
    for r in rows:
        if r.label not in best or r.tokens_per_second > best[r.label].tokens_per_second:
            best[r.label] = r
    return list(best.values())


def _k_findings(pairs: list[tuple[BenchRow, BenchRow]]) -> list[str]:
    out = []
    by_condition: dict[str, list[tuple[BenchRow, BenchRow]]] = defaultdict(list)
    for pair in pairs:
        by_condition[condition(pair[0])].append(pair)
    for cond, group in by_condition.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda p: p[0].k)
        low, high = group[0], group[-1]
        out.append(
            f"On {cond}, EAGLE-3.1's mean acceptance length is {_ratio_words(_al_ratio(high))} EAGLE-3's at "
            f"k={high[0].k} ({high[1].mean_acceptance_length:.2f} vs {high[0].mean_acceptance_length:.2f}) "
            f"and {_ratio_words(_al_ratio(low))} at k={low[0].k} ({low[1].mean_acceptance_length:.2f} vs "
            f"{low[0].mean_acceptance_length:.2f}).")
        out.append(
            f"From k={low[0].k} to k={high[0].k}, EAGLE-3's acceptance length goes from "
            f"{low[0].mean_acceptance_length:.2f} to {high[0].mean_acceptance_length:.2f} and EAGLE-3.1's from "
            f"{low[1].mean_acceptance_length:.2f} to {high[1].mean_acceptance_length:.2f}.")
        fastest = [max((p[i] for p in group), key=lambda r: r.speedup or 0) for i in (0, 1)]
        out.append(f"Fastest k on {cond}: EAGLE-3 at k={fastest[0].k} ({fastest[0].speedup:.2f}×), "
                   f"EAGLE-3.1 at k={fastest[1].k} ({fastest[1].speedup:.2f}×).")
    return out


def _context_findings(pairs: list[tuple[BenchRow, BenchRow]]) -> list[str]:
    out = []
    by_k: dict[tuple, list[tuple[BenchRow, BenchRow]]] = defaultdict(list)
    for pair in pairs:
        by_k[(pair[0].k, pair[0].template)].append(pair)
    for (k, template), group in by_k.items():
        lengths = sorted({p[0].context_tokens for p in group})
        if len(lengths) < 2:
            continue
        group.sort(key=lambda p: p[0].context_tokens)
        ratios = "; ".join(f"{_al_ratio(p):.2f}× at ~{p[0].context_tokens} prompt tokens ({p[0].prompt_set})"
                           for p in group)
        out.append(f"EAGLE-3.1 / EAGLE-3 mean acceptance length at k={k} ({template} template): {ratios}.")
        short, long = group[0], group[-1]
        keep = [long[i].mean_acceptance_length / short[i].mean_acceptance_length for i in (0, 1)]
        out.append(f"From ~{short[0].context_tokens} to ~{long[0].context_tokens} prompt tokens, EAGLE-3 keeps "
                   f"{_pct(keep[0])} of its acceptance length and EAGLE-3.1 keeps {_pct(keep[1])}.")
    return out


def _template_findings(pairs: list[tuple[BenchRow, BenchRow]]) -> list[str]:
    out = []
    reference = {p[0].k: p for p in pairs if p[0].template == "default" and
                 not p[0].prompt_set.endswith("unfamiliar-system")}
    for pair in pairs:
        base = reference.get(pair[0].k)
        if base is None or pair is base:
            continue
        keep = [pair[i].mean_acceptance_length / base[i].mean_acceptance_length for i in (0, 1)]
        out.append(f"Under {condition(pair[0])} (vs {condition(base[0])}, k={pair[0].k}): EAGLE-3 keeps "
                   f"{_pct(keep[0])} of its acceptance length, EAGLE-3.1 keeps {_pct(keep[1])}; EAGLE-3.1 / EAGLE-3 "
                   f"= {_ratio_words(_al_ratio(pair))}.")
    return out


def _depth_findings(pairs: list[tuple[BenchRow, BenchRow]]) -> list[str]:
    out = []
    for e3, e31 in pairs:
        if not (e3.attention_by_depth and e31.attention_by_depth):
            continue
        d = min(len(e3.attention_by_depth), len(e31.attention_by_depth))
        a3, a31 = e3.attention_by_depth[d - 1], e31.attention_by_depth[d - 1]
        out.append(f"At draft depth {d} ({condition(e3)}, k={e3.k}), EAGLE-3 puts {_pct(a3.draft)} of its "
                   f"attention on its own drafts and {_pct(a3.sink)} on the sink token; EAGLE-3.1 puts "
                   f"{_pct(a31.draft)} and {_pct(a31.sink)}.")
        if e3.hidden_rms_by_depth and e31.hidden_rms_by_depth:
            r3, r31 = e3.hidden_rms_by_depth, e31.hidden_rms_by_depth
            out.append(f"The hidden state carried into depth 1..{len(r3)} has RMS {r3[0]:.2f} → {r3[-1]:.2f} for "
                       f"EAGLE-3 (×{r3[-1] / r3[0]:.2f}) and {r31[0]:.2f} → {r31[-1]:.2f} for EAGLE-3.1 "
                       f"(×{r31[-1] / r31[0]:.2f}).")
        if e3.per_position_acceptance and e31.per_position_acceptance:
            p3, p31 = e3.per_position_acceptance[-1], e31.per_position_acceptance[-1]
            out.append(f"Acceptance at the deepest position ({len(e3.per_position_acceptance)}) there: EAGLE-3 "
                       f"{_pct(p3)}, EAGLE-3.1 {_pct(p31)} of drafting steps.")
    return out


def deepest_pairs(matched: list[tuple[BenchRow, BenchRow]]) -> list[tuple[BenchRow, BenchRow]]:
    """Per condition, the pair with the largest k."""
    best: dict[str, tuple[BenchRow, BenchRow]] = {}
    for pair in matched:
        if condition(pair[0]) not in best or pair[0].k > best[condition(pair[0])][0].k:
            best[condition(pair[0])] = pair
    return list(best.values())


def study_rows(rows: list[BenchRow], study: str) -> list[BenchRow]:
    """Rows a report section reads: those made for the study, or all rows when no sweep named any study."""
    if any(s in STUDIES for r in rows for s in r.studies):
        return [r for r in rows if study in r.studies]
    return rows


def _tree_findings(rows: list[BenchRow]) -> list[str]:
    """Each draft tree against the chain of the same drafter, k, prompt set and template: acceptance and speed."""
    chains = {(r.drafter, r.k, r.prompt_set, r.template): r for r in rows
              if r.kind == "eagle" and r.tree_nodes is None and r.mean_acceptance_length is not None}
    out = []
    for tree in rows:
        chain = chains.get((tree.drafter, tree.k, tree.prompt_set, tree.template))
        if tree.tree_nodes is None or tree.mean_acceptance_length is None or chain is None:
            continue
        finding = (f"On {condition(tree)}, {method_name(tree)} accepted {tree.mean_acceptance_length:.2f} tokens per "
                   f"step against its chain's {chain.mean_acceptance_length:.2f} "
                   f"({_ratio_words(tree.mean_acceptance_length / chain.mean_acceptance_length)})")
        if tree.speedup is not None and chain.speedup is not None:
            finding += (f"; speedup {tree.speedup:.2f}× against {chain.speedup:.2f}×"
                        + (", within noise" if _overlap(tree, chain) else "")
                        + (" (one pass: no spread measured)" if speedup_range(tree) is None else ""))
        if None not in (tree.verify_ms, chain.verify_ms, tree.draft_ms, chain.draft_ms, tree.verified_per_step,
                        chain.verified_per_step):
            finding += (f"; per step it verified {tree.verified_per_step:.0f} rows against "
                        f"{chain.verified_per_step:.0f}, in {tree.verify_ms:.0f} ms against {chain.verify_ms:.0f}, "
                        f"after {tree.draft_ms:.0f} ms of drafting against {chain.draft_ms:.0f}")
        out.append(finding + ".")
    return out


def _prediction_findings(rows: list[BenchRow]) -> list[str]:
    """How far the speedups predicted from this machine's step costs landed from the measured ones."""
    both = [r for r in rows if r.predicted_speedup is not None and r.speedup is not None]
    if not both:
        return []
    def error(r: BenchRow) -> float:
        return r.predicted_speedup / r.speedup - 1

    errors = sorted(map(error, both))
    worst = max(both, key=lambda r: abs(error(r)))
    return [f"Predicted from this machine's step costs (each row's own steps priced at the measured cost of a plain "
            f"step, of drafting and of verifying that many rows), the speedups were {errors[0]:+.0%} to "
            f"{errors[-1]:+.0%} off the measured ones (median {statistics.median(errors):+.0%}, {len(both)} rows); "
            f"the furthest: {method_name(worst)} on {condition(worst)}, {worst.predicted_speedup:.2f}× predicted "
            f"against {worst.speedup:.2f}× measured."]


def _auto_findings(rows: list[BenchRow]) -> list[str]:
    """Each k auto row against the fastest fixed k of the same drafter (chains) on the same prompt set and template:
    what it chose, and its speed as a share of that k's, pass by pass (the passes ran back to back)."""
    out = []
    for auto in (r for r in rows if r.k_auto and r.tokens_per_second is not None):
        fixed = [r for r in rows if r.drafter == auto.drafter and condition(r) == condition(auto) and r.k is not None
                 and r.tree_nodes is None and r.tokens_per_second is not None]
        chose = "; ".join(f"{'plain decoding' if c['k'] is None else 'k=' + str(c['k'])} on {c['answers']} "
                          f"answer{'s' * (c['answers'] != 1)}" for c in auto.auto_k or [])
        finding = f"On {condition(auto)}, {method_name(auto)} chose {chose}: {auto.speedup:.2f}× plain decoding"
        if fixed:
            best = max(fixed, key=lambda r: r.tokens_per_second)
            shares = sorted(a / b for a, b in zip(auto.tokens_per_second_runs, best.tokens_per_second_runs))
            finding += (f", {auto.tokens_per_second / best.tokens_per_second:.0%} of the fastest fixed k's speed "
                        f"(k={best.k}, {best.speedup:.2f}×)")
            if len(shares) > 1:
                finding += f"; per pass {shares[0]:.0%} to {shares[-1]:.0%}"
            finding += ", within noise" if _overlap(auto, best) else ""
        out.append(finding + ".")
    return out


def findings(rows: list[BenchRow], greedy: bool) -> list[str]:
    """Plain-language statements of the measured numbers."""
    out = _lossless_findings(rows, greedy) + _speed_findings(rows) + _method_findings(rows)
    out += _prediction_findings(rows) + _tree_findings(rows)
    out += _auto_findings(rows)
    out += _k_findings(pairs(study_rows(rows, "k")))
    out += _context_findings(pairs(study_rows(rows, "context")))
    out += _template_findings(pairs(study_rows(rows, "template")))
    out += _depth_findings(deepest_pairs(pairs(study_rows(rows, "k"))))
    all_pairs = pairs(rows)
    if all_pairs:
        wins = sum(_al_ratio(p) > 1 for p in all_pairs)
        out.append(f"Overall, EAGLE-3.1 had the longer mean acceptance length in {wins} of {len(all_pairs)} matched "
                   "(prompt set, template, k) configurations.")
    return out
