"""The About tab's text: the prose is written here, every measured number in it is read from the committed result
files, and each claim made of a number (ahead, slower than plain decoding, stays near one value) is chosen by the
number. After a re-measurement the tab says what the new files say; nothing here is to be edited by hand for it.

`Measurements.committed()` reads the files; `about_markdown(m)` renders them (tests render altered copies).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from playground.bench.engines import committed_section
from playground.bench.landing import (
    SET_NAMES,
    beside_words,
    kind_words_of,
    landing_records,
    nearest_record,
    vllm_landing_records,
)
from playground.bench.rows import result_cell
from playground.drafting import EAGLE3, EAGLE3_1, METHODS, PLAIN
from playground.machine import cpu_kind, cpu_name, kind_words
from playground.playback.baseline import SAMPLING_HELP
from playground.presets import KIMI_TINY, REPO_ROOT, SHIPPED_DRAFTERS
from playground.viz import DRAFT_ACCEPTANCE_RATE_HELP, MEAN_ACCEPTANCE_LENGTH_HELP
from playground.viz.summary import (
    BASELINE_HELP,
    SEEN_TOKENS_PER_SECOND_HELP,
    SPEEDUP_HELP,
    TOKENS_PER_SECOND_HELP,
)
from playground.viz.summary import times_text as _times

DRIFT_STUDY = REPO_ROOT / "assets" / "bench" / "drift" / "results.json"
KIMI_DRIFT_STUDY = REPO_ROOT / "assets" / "bench" / "drift-kimi-tiny" / "results.json"
SHIFTED_CELLS = (("long-1k", "default"), ("long-4k", "default"), ("held-out", "llama3"),
                 ("unfamiliar-system", "default"))  # the drift study's cells away from the training distribution
DRAFTERS = (EAGLE3, EAGLE3_1)
NAMES = {d: METHODS[d].label for d in DRAFTERS}
REPORTED_GAIN = 1.2  # EAGLE-3.1's long-context gain over EAGLE-3 as its authors report it
NEAR = 0.1  # a carried state's RMS "stays near" one value when it moves less than this over the depths
TIE = 0.05  # acceptance lengths closer than this are "nearly equal"


def _load(path: Path) -> dict | None:
    """The file's content, or None where this copy of the playground does not carry it (a Space folder carries only
    the assets its hardware uses)."""
    return json.loads(path.read_text()) if path.exists() else None


@dataclass
class Measurements:
    """The committed result files the About tab quotes, as written by the commands that measured them; a section whose
    files are absent is left out."""

    drift: dict | None  # bench --profile drift (assets/bench/drift/results.json)
    evaluation: dict | None  # train evaluate (the shipped pair's evaluation.json)
    speed: dict | None  # train speed (speed.json)
    long_context: dict | None  # train evaluate-long (long-context.json)
    kimi_evaluation: dict | None  # the tiny MLA pair's evaluation.json
    kimi_engines: dict | None  # its engines.json (ours vs vLLM)
    kimi_drift: dict | None  # its drift study
    landing: list[dict] = field(default_factory=list)  # bench --profile landing, one file per CPU kind, newest first
    vllm_landing: dict[str, dict] = field(default_factory=dict)  # bench-engines --landing, by CPU kind
    kind: str = ""  # this machine's CPU kind (machine.cpu_kind)

    @classmethod
    def committed(cls) -> Measurements:
        return cls(landing=landing_records(), vllm_landing=vllm_landing_records(), kind=cpu_kind(),
                   drift=_load(DRIFT_STUDY), evaluation=_load(SHIPPED_DRAFTERS / "evaluation.json"),
                   speed=_load(SHIPPED_DRAFTERS / "speed.json"),
                   long_context=_load(SHIPPED_DRAFTERS / "long-context.json"),
                   kimi_evaluation=_load(KIMI_TINY / "evaluation.json"), kimi_engines=_load(KIMI_TINY / "engines.json"),
                   kimi_drift=_load(KIMI_DRIFT_STUDY))


def _al(value: float) -> str:
    return f"{value:.2f}"


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def _ratio(rows: list[dict], **cell) -> float:
    return result_cell(rows, EAGLE3_1, **cell)["mean_acceptance_length"] / result_cell(rows, EAGLE3, **cell)[
        "mean_acceptance_length"]


def _stays_or_moves(values: list[float], digits: int = 1) -> str:
    if max(values) - min(values) < NEAR:
        return f"stays near {values[-1]:.{digits}f}"
    return f"moves between {min(values):.{digits}f} and {max(values):.{digits}f}"


def _lead(a: float, b: float, names: tuple[str, str] = (NAMES[EAGLE3], NAMES[EAGLE3_1])) -> str:
    """Who is ahead of two acceptance lengths, in words."""
    if abs(a - b) < TIE:
        return "the two nearly equal"
    return f"{names[1] if b > a else names[0]} ahead"


def verification_cost(speed: dict) -> str:
    """What verifying k + 1 = 5 tokens costs in plain steps, per drafter ("1.3", or "1.3–1.4" where they differ)."""
    plain = speed["speed"]["plain"]["median_ms_per_token"]
    costs = sorted({f"{speed['speed']['by_k']['4'][d]['median_verify_ms_per_step'] / plain:.1f}" for d in DRAFTERS})
    return "–".join(costs)


def _intro(m: Measurements) -> str:
    cost = f" (about {verification_cost(m.speed)} here, below)" if m.speed else ""
    return f"""
### What you are looking at
The target model writes every token; a small **drafter** guesses the next *k* tokens first and the target checks
them all in one forward pass. Each accepted guess saves the target a forward pass of its own, but the check is not
free: on a CPU, verifying k + 1 tokens costs more than one plain step{cost}, so drafting pays only when enough
guesses are accepted.

- **Coloured tokens** were drafted and accepted, coloured by depth (1 = the first guess of a step). **Plain tokens**
  are the target's own (the bonus token of each step, or every token with plain decoding). Hover or tap a token for
  its step, depth and the drafter's probability.
- **EAGLE-3** drafters fuse three of the target's hidden layers and feed their own output back for deeper guesses.
  **EAGLE-3.1** adds `fc_norm` (an RMSNorm on each fused hidden state) and `norm_output` (feed back the normalised
  state). The drift chart shows where the drafter looks at each depth; the RMS chart, how large the carried state is.
"""


def _drift_findings(m: Measurements) -> list[str]:
    rows = m.drift["rows"]
    e3, e31 = result_cell(rows, EAGLE3), result_cell(rows, EAGLE3_1)
    rms3, rms31 = e3["hidden_rms_by_depth"], e31["hidden_rms_by_depth"]
    grows = "grows" if rms3[-1] > rms3[0] else "changes"
    depth = len(e3["attention_by_depth"])
    a3, a31 = e3["attention_by_depth"][-1], e31["attention_by_depth"][-1]
    sink = max(a3["sink"], a31["sink"])
    sink_words = "under 1 %" if sink < 0.01 else f"at most {_pct(sink)}"
    shifted = [_times(_ratio(rows, prompt_set=p, template=t)) for p, t in SHIFTED_CELLS]
    gain = [_ratio(rows, prompt_set=p, template=t) for p, t in SHIFTED_CELLS]
    largest = "largest" if min(gain) > max(_ratio(rows, k=k) for k in (1, 4)) else "not always largest"
    al = {(d, k): _al(result_cell(rows, d, k=k)["mean_acceptance_length"]) for d in DRAFTERS for k in (1, 4)}
    contexts = {p: f"~{result_cell(rows, EAGLE3, p)['context_tokens'] / 1000:.0f}k" for p in ("long-1k", "long-4k")}
    return [
        f"- The carried state's RMS {grows} with depth for EAGLE-3 (about {rms3[0]:.0f} → {rms3[-1]:.0f} over depths "
        f"1–{len(rms3)}) and {_stays_or_moves(rms31)} for EAGLE-3.1: that is what `norm_output` fixes.",
        f"- At depth {depth}, EAGLE-3 puts {_pct(a3['draft'])} of its attention on its own drafts, EAGLE-3.1 "
        f"{_pct(a31['draft'])}; both give the first (sink) token {sink_words}. The drift chart shows both shares "
        f"by depth.",
        f"- EAGLE-3.1's gain is {largest} under distribution shift: at k = 8 its acceptance length is {shifted[0]} "
        f"EAGLE-3's at {contexts['long-1k']} prompt tokens and {shifted[1]} at {contexts['long-4k']}, {shifted[2]} "
        f"under the unfamiliar `llama3` template and {shifted[3]} with unfamiliar system prompts. On the study's "
        f"short held-out prompts (k = 4: EAGLE-3 {al[EAGLE3, 4]}, EAGLE-3.1 {al[EAGLE3_1, 4]}; k = 1: "
        f"{al[EAGLE3, 1]} and {al[EAGLE3_1, 1]}) the two are close.",
    ]


def _evaluation_finding(m: Measurements) -> str:
    def at(k: str) -> str:
        e3, e31 = (m.evaluation["acceptance"][d][k]["mean_acceptance_length"] for d in DRAFTERS)
        return f"{_lead(e3, e31)} at k = {k} (EAGLE-3.1 {_al(e31)}, EAGLE-3 {_al(e3)})"

    return f"- The {m.evaluation['prompts']['count']}-prompt evaluation finds {at('4')}, {at('8')} and {at('1')}."


def _long_context_finding(m: Measurements) -> str:
    sets = m.long_context["sets"]
    medians = {name: [c["drafters"][d]["median_acceptance_length"] for d in DRAFTERS] for name, c in sets.items()}
    lengths = {name: f"~{c['median_prompt_tokens'] / 1000:.0f}k" for name, c in sets.items()}
    ratios = {name: b / a for name, (a, b) in medians.items()}
    quoted = ", ".join(f"{a:.2f} vs {b:.2f} at {lengths[name]}" for name, (a, b) in medians.items())
    ahead = [name for name, r in ratios.items() if r > 1]
    spread = f"{100 * (min(ratios.values()) - 1):.0f}–{100 * (max(ratios.values()) - 1):.0f} %"
    if len(ahead) == len(ratios):
        lead = f"**On long prompts nobody tuned for, EAGLE-3.1 leads at every length**, by {spread}"
    else:
        lead = (f"**On long prompts nobody tuned for, EAGLE-3.1 leads at {len(ahead)} of {len(ratios)} lengths** "
                f"(from {spread})")
    reaching = [lengths[name] for name, r in ratios.items() if r >= REPORTED_GAIN]
    where = ("at every length" if len(reaching) == len(ratios) else f"only at {', '.join(reaching)}" if reaching
             else "at no length")
    reported = f"it reaches the {REPORTED_GAIN}× the EAGLE-3.1 work reports {where}"
    return (f"- {lead}; {reported}. On numpy's source (a library the drafters never trained on; `long-context.json`, "
            f"{min(len(c['prompts']) for c in sets.values())} prompts per length, k = {m.long_context['k']}) the "
            f"median acceptance length, EAGLE-3 vs EAGLE-3.1, is {quoted}. The drift study's long prompts above are "
            f"held-out standard-library modules, closer to the training data. The shipped pair went through a "
            f"long-context training stage, averaged back a quarter of the way (WiSE-FT) so that short prompts lost "
            f"nothing.")


def _speed_finding(m: Measurements) -> str:
    speed = m.speed
    by_drafter = speed["speed"]["by_k"]["4"]
    fixed = [by_drafter[d] for d in DRAFTERS]
    adaptive_names = sorted(n for n in by_drafter if " adaptive " in n)
    adaptive = {n.split(" adaptive ")[0]: by_drafter[n] for n in adaptive_names}
    low, high = min(d["speedup_range"][0] for d in fixed), max(d["speedup_range"][1] for d in fixed)
    lengths = sorted(f"{d['mean_acceptance_length']:.1f}" for d in fixed)
    machine, prompts = speed["machine"], speed["prompts"]
    sets = ", ".join(f"{n} {s}" for s, n in prompts["per_set"].items())
    verdict = "modest" if max(d["median_speedup"] for d in fixed) < 1.5 else "clear"
    text = (f"- On a {machine['cores']}-core {cpu_name(machine)} ({kind_words_of(machine)}; "
            f"{'measured ' + speed['started'][:10] if speed.get('started') else 'its date not recorded'}) the speedup "
            f"is {verdict} on long answers: at k = 4, "
            f"{_times(fixed[1]['median_speedup'])} for EAGLE-3.1 and {_times(fixed[0]['median_speedup'])} for EAGLE-3 "
            f"(`speed.json`: the shipped drafters, {prompts['count']} prompts — {sets} —, "
            f"{speed['speed']['max_new_tokens']} tokens, {machine['torch_threads']} threads; per-run range "
            f"{low:.2f}–{high:.2f}×). There the acceptance length is only ~{lengths[0]}–{lengths[-1]}, and verifying "
            f"k + 1 tokens costs about {verification_cost(speed)} plain steps.")
    if EAGLE3_1 in adaptive:
        a31 = adaptive[EAGLE3_1]
        slowest = min(a["speedup_range"][0] for a in adaptive.values())
        others = "; ".join(f"{NAMES[d]} {_times(a['median_speedup'])}" for d, a in adaptive.items() if d != EAGLE3_1)
        text += (f" **Adaptive drafting** (end the chain after a draft the drafter gave less than "
                 f"{a31['min_draft_prob']:g}) skips verifying drafts that would mostly be rejected: EAGLE-3.1 "
                 f"{_times(a31['median_speedup'])} (pooled over all tokens {_times(a31['pooled_speedup'])}, against "
                 f"{_times(fixed[1]['pooled_speedup'])} at fixed k){'; ' + others if others else ''}; "
                 + ("its slowest runs above 1.0×." if slowest > 1.0 else
                    "the slowest adaptive run was still below plain decoding."))
    return text


def _slower_finding(m: Measurements) -> str:
    rows = m.drift["rows"]
    long4k = {d: result_cell(rows, d, "long-4k")["speedup"] for d in DRAFTERS}
    llama3 = result_cell(rows, EAGLE3, template="llama3")["speedup"]
    short = {d: result_cell(rows, d, k=4)["speedup"] for d in DRAFTERS}
    context = f"~{result_cell(rows, EAGLE3, 'long-4k')['context_tokens'] / 1000:.0f}k"
    slower = [f"at {context} prompt tokens (Python source before a question), at k = 8: {_times(long4k[EAGLE3])} for "
              f"EAGLE-3 and {_times(long4k[EAGLE3_1])} for EAGLE-3.1"]
    slower.append(f"under the unfamiliar `llama3` template EAGLE-3 ran at {_times(llama3)}")
    below = long4k[EAGLE3] < 1 or long4k[EAGLE3_1] < 1 or llama3 < 1
    head = ("- **EAGLE can be slower than plain decoding.** In the drift study (one pass: indicative only): "
            if below else "- In the drift study (one pass: indicative only) no cell ran below plain decoding: ")
    return (head + "; ".join(slower) + f". On its short held-out answers EAGLE-3 reached {_times(short[EAGLE3])} and "
            f"EAGLE-3.1 {_times(short[EAGLE3_1])} at k = 4. On prompts unlike the drafters' training data, such as "
            "long essays or prompts in other languages, EAGLE can be slower than plain decoding: fewer guesses are "
            "accepted, and every rejected one still costs verification. The Speed chart shows this run's measured "
            "figure, never an estimate.")


def _shipped_pair(m: Measurements) -> str:
    if not (m.drift and m.evaluation and m.speed and m.long_context):
        return ""
    config = m.drift["config"]
    lines = [
        "### On the shipped pair (SmolLM2-135M-Instruct and our drafters)",
        f"The drift study (`assets/bench/drift/`: {config['limit']} prompts per cell, {config['max_new_tokens']} "
        f"tokens, {'one pass' if config['repeats'] == 1 else str(config['repeats']) + ' passes'}), the "
        f"{m.evaluation['prompts']['count']}-prompt evaluation and the speed runs "
        "(`assets/models/smollm2-135m/evaluation.json` and `speed.json`):",
        *_drift_findings(m), _evaluation_finding(m), _long_context_finding(m), _speed_finding(m), _slower_finding(m),
    ]
    return "\n".join(lines) + "\n"


ENGINES = """
### Our engine and vLLM
The same pair runs on two engines here: **ours** (the microscope: only it shows drift, RMS and draft probabilities)
and **vLLM**, the engine EAGLE-3.1 ships in, through its CPU build (preset `smollm2-135m-vllm`; in Compare, each
side's *engine*). Both give the same greedy tokens on the same weights: vLLM reads the float32 ones, so a comparison
across engines runs our side on `smollm2-135m-float32`. vLLM starts an engine per drafter and k on first use (about a
minute on 2 cores, then it is kept) and on a 2-core machine binds its worker to one core. Our engine decodes Llama
targets on the CPU through its own fast path (the same weights and, in float32, the same logits as transformers;
a preallocated cache; weights packed for the verification's k + 1 rows). Measured by
`python -m playground bench-engines` (`assets/bench/engines-cpu/`): per-user tok/s is a request's tokens / its
wall time (the median over requests), with C requests in flight at a time; speedup is over the same engine's plain
decoding at the same C; the instrumented rows record drift, RMS and draft probabilities, as the Chat tab does.
The table below was measured on the pair before its long-context stage (step 1840) and has not been re-run on the
shipped drafters, nor on an AMD EPYC (AVX2 only), where the two engines' order may differ. Its prompts are MT-Bench's
alone, the set on which our drafters accept least; the live Chat and Compare tabs measure this machine, now.

**Precision.** On a CPU the default multiplies the target's GGUF file's own 4-bit groups (int4, the weights
llama.cpp reads) where they measure faster at load and keep a verification's rows apart, and its plain decoding of
them is the baseline every speedup is over; `smollm2-135m-float32` keeps float32, the logits transformers computes.
The preset `smollm2-135m-bf16` runs the target in bfloat16: on a CPU with
bf16 instructions (AVX-512 BF16 or AMX) our engine verifies drafts row-exactly there, so greedy speculation stays
token-identical to plain bf16 decoding; elsewhere the run's status says it is not. Every run says its precision.

"""


def _kimi(m: Measurements) -> str:
    if not (m.kimi_evaluation and m.kimi_engines and m.kimi_drift):
        return ""
    evaluation, engines, rows = m.kimi_evaluation, m.kimi_engines, m.kimi_drift["rows"]
    k = str(engines["k"])
    by_method = {r["method"]: r for r in engines["rows"] if r["method"] != PLAIN}
    same = sum(r["same_ids"] for r in engines["rows"])
    prompts = sum(r["prompts"] for r in engines["rows"])
    agree = "Both engines give the same tokens" if same == prompts else "The engines' tokens differ"
    per_method = {r["prompts"] for r in engines["rows"]}
    engines_al = " and ".join(
        f"{by_method[d]['acceptance']['ours']['mean_acceptance_length']:.3f} / "
        f"{by_method[d]['acceptance']['vllm']['mean_acceptance_length']:.3f} for {NAMES[d]}" for d in DRAFTERS)
    ours = ", ".join(f"{NAMES[d]} {_al(evaluation['acceptance'][d][k]['mean_acceptance_length'])}" for d in DRAFTERS)
    rms3, rms31 = (result_cell(rows, d)["hidden_rms_by_depth"] for d in DRAFTERS)
    llama3 = _ratio(rows, template="llama3")
    keeps = "keeps far more" if llama3 > 1.5 else "keeps more" if llama3 > 1 else "keeps no more"
    return f"""### Kimi K2.6's architecture, at toy size
The presets `kimi-tiny` (our engine) and `kimi-tiny-vllm` run a 37 M-parameter DeepSeek-V3 model — Kimi K2's
multi-head latent attention and a mixture of experts — with MLA EAGLE-3 and EAGLE-3.1 drafters in the layout vLLM's
`deepseek_eagle3` reads. Its text loops and is often wrong; it is there to show the MLA drafter path. {agree}
({same} of {prompts} runs, {'/'.join(str(p) for p in sorted(per_method))} held-out prompts per method at k = {k}),
with acceptance length, ours / vLLM, {engines_al}. Our engine's evaluation at k = {k}: {ours}. EAGLE-3's carried
state {'grows' if rms3[-1] > rms3[0] else 'changes'} with depth (RMS {rms3[0]:.1f} → {rms3[-1]:.1f}) while
EAGLE-3.1's {_stays_or_moves(rms31[1:])}, and under the unfamiliar `llama3` template EAGLE-3.1 {keeps} of its
acceptance length ({_times(llama3)} EAGLE-3's at k = 8). The real Kimi K2.6 on 4 GPUs is not verified here: see
docs/kimi.md.
"""


METRICS = f"""
### Metric definitions (vLLM's)
- {MEAN_ACCEPTANCE_LENGTH_HELP}
- Per-position acceptance rate = drafts accepted at position *i* / drafting steps.
- {DRAFT_ACCEPTANCE_RATE_HELP}
- {SPEEDUP_HELP}
- {TOKENS_PER_SECOND_HELP} {SEEN_TOKENS_PER_SECOND_HELP}
- {BASELINE_HELP} {SAMPLING_HELP}
"""


def _kind_speedups(record: dict, auto: bool) -> str:
    """'EAGLE-3 1.90× held-out, …; EAGLE-3.1 …' for one landing record at k = 4 or at k auto."""
    def cells(drafter: str) -> str:
        rows = [r for r in record["rows"] if r["drafter"] == drafter and bool(r.get("k_auto")) == auto
                and r.get("speedup") is not None]
        return ", ".join(f"{_times(r['speedup'])} {SET_NAMES.get(r['prompt_set'], r['prompt_set'])}" for r in rows)

    return "; ".join(f"{NAMES[d]} {cells(d)}" for d in DRAFTERS)


def _vllm_on_kind(engines: dict | None) -> str:
    """' vLLM's CPU build on the same kind, <date>: EAGLE-3 1.07×, …' from a kind's vLLM landing file ("" without)."""
    if engines is None:
        return ""
    c = engines["config"]
    one = {(r["engine"], r["drafter"]): r["speedup"] for r in engines["rows"]
           if r["concurrency"] == 1 and not r["instrumented"] and not r.get("neighbours") and r["drafter"] in DRAFTERS}
    each = ", ".join(f"{NAMES[d]} {_times(one['vllm', d])} (ours {_times(one['local', d])})" for d in DRAFTERS)
    return (f" vLLM's CPU build on the same machine, {engines['started'][:10]}, one request at a time, "
            f"{c['prompts']} {SET_NAMES.get(c['prompt_set'], c['prompt_set'])} prompts × {c['max_new_tokens']} "
            f"tokens, over its own plain decoding: {each}.")


def nearest_kind_line(m: Measurements) -> str:
    """Which committed kind's figures stand nearest for the machine this app runs on, or that none does."""
    mine = f"This app runs on a CPU of the kind {kind_words(m.kind)}"
    nearest = nearest_record(m.landing, m.kind)
    if nearest is None:
        return (f"{mine}: none of the committed kinds shares its vector and matrix units, so its speedups may differ "
                "from every figure above; the Chat and Compare tabs measure it, now.")
    if nearest["cpu_kind"] == m.kind:
        return f"{mine}: the figures above measured on {nearest['date']} are of this very kind."
    return (f"{mine}: the nearest committed kind is {kind_words(nearest['cpu_kind'])} ({nearest['date']}), with the "
            "same vector and matrix units; its figures are the nearest guide, not a measurement of this machine.")


def landing_weights(record: dict) -> str:
    """Which weights a landing record's runs multiplied (its rows' run fields), the baseline's as the drafters'."""
    weights = {r["run_fields"].get("weights") for r in record["rows"] if r.get("run_fields")} - {None}
    return " and ".join(sorted(weights)) or "unrecorded"


def _per_kind(m: Measurements) -> str:
    if not m.landing:
        return ""
    lines = ["### Figures per CPU kind",
             "Speedup over plain decoding of the same target on the same weights (each line names them), greedy, "
             "measured by `python -m playground bench "
             "--profile landing` (`assets/bench/landing/`, one file per CPU kind; the README's table reads the same "
             "files):"]
    for record in m.landing:
        machine = record["machine"]
        lines.append(f"- **{kind_words(record['cpu_kind'])}**, {machine['cores']} cores, {record['date']}, "
                     f"{beside_words(record)}, over plain decoding on the {landing_weights(record)} weights. At "
                     f"k = 4, {_kind_speedups(record, False)}; at k auto, "
                     f"{_kind_speedups(record, True)}.{_vllm_on_kind(m.vllm_landing.get(record['cpu_kind']))}")
    lines.append("")
    lines.append(nearest_kind_line(m))
    return "\n".join(lines) + "\n"


def about_markdown(m: Measurements) -> str:
    return "\n".join([_intro(m), _per_kind(m), _shipped_pair(m), ENGINES, committed_section(), _kimi(m), METRICS])
