"""Gradio wiring of the playground: Chat, Compare and Benchmark tabs. No decoding or plotting logic lives here."""

from __future__ import annotations

import html

import gradio as gr

from playground.bench.engines import committed_section
from playground.presets import default_preset_name, get_preset
from playground.viz import DRAFT_ACCEPTANCE_RATE_HELP, MEAN_ACCEPTANCE_LENGTH_HELP

from .bench import build_bench_tab
from .chat import build_chat_tab
from .common import LINE, STOP_SWITCHES, session_id
from .compare import build_compare_tab
from .own_pair import wire_pair_panel
from .style import APP_CSS

THEME = gr.themes.Soft(primary_hue="teal", secondary_hue="slate")

ABOUT = f"""
### What you are looking at
The target model writes every token; a small **drafter** guesses the next *k* tokens first and the target checks
them all in one forward pass. Each accepted guess saves the target a forward pass of its own, but the check is not
free: on a CPU, verifying k + 1 tokens costs more than one plain step (about 1.3–1.4 here, below), so drafting pays only
when enough guesses are accepted.

- **Coloured tokens** were drafted and accepted, coloured by depth (1 = the first guess of a step). **Plain tokens**
  are the target's own (the bonus token of each step, or every token with plain decoding). Hover or tap a token for
  its step, depth and the drafter's probability.
- **EAGLE-3** drafters fuse three of the target's hidden layers and feed their own output back for deeper guesses.
  **EAGLE-3.1** adds `fc_norm` (an RMSNorm on each fused hidden state) and `norm_output` (feed back the normalised
  state). The drift chart shows where the drafter looks at each depth; the RMS chart, how large the carried state is.

### On the shipped pair (SmolLM2-135M-Instruct and our drafters)
The drift study (`assets/bench/drift/`: 4 prompts per cell, 40 tokens, one pass), the 8-prompt evaluation and the
speed runs (`assets/models/smollm2-135m/evaluation.json` and `speed.json`):
- The carried state's RMS grows with depth for EAGLE-3 (about 12 → 22 over depths 1–8) and stays near 1.4 for
  EAGLE-3.1: that is what `norm_output` fixes.
- At depth 8, EAGLE-3 puts 37 % of its attention on its own drafts, EAGLE-3.1 36 %; both give the first (sink)
  token under 1 %. The drift chart shows both shares growing with depth.
- EAGLE-3.1's gain is largest under distribution shift: at k = 8 its acceptance length is 1.09× EAGLE-3's at ~1k
  prompt tokens and 1.23× at ~4k, 1.24× under the unfamiliar `llama3` template and 1.14× with unfamiliar system
  prompts. On short familiar prompts the two are close: on the study's held-out prompts (k = 4: EAGLE-3 2.76,
  EAGLE-3.1 2.80; k = 1: 1.76 and 1.74), and the 8-prompt evaluation finds EAGLE-3.1 ahead
  (k = 4: EAGLE-3.1 2.66, EAGLE-3 2.54; k = 8: 3.06 and 2.67) and the two nearly equal at k = 1 (1.70 and 1.68).
- **On long prompts nobody tuned for, EAGLE-3.1 leads, by less than reported.** On numpy's source (a library the
  drafters never trained on; `long-context.json`, 8 prompts per length, k = 8) the median acceptance length,
  EAGLE-3 vs EAGLE-3.1, is 1.76 vs 2.14 at ~1k tokens, 1.90 vs 2.03 at ~2k, 1.75 vs 1.91 at ~4k and 1.68 vs 1.89 at
  ~8k: ahead at every length, by 7–21 %, but it reaches the 1.2× the EAGLE-3.1 work reports only at ~1k, not at 2k
  and beyond, and the gap is within the spread across prompts. The drift study's long prompts above are held-out
  standard-library modules, closer to the training data. The shipped pair went through a long-context training
  stage, averaged back a quarter of the way (WiSE-FT) so that short prompts lost nothing: that lengthened both
  drafters at every length, and the ratio moved little.
- On a 2-core Intel Xeon (AVX-512 BF16 and AMX) the speedup is modest on long answers: at k = 4, 1.20× for
  EAGLE-3.1 and 1.11× for EAGLE-3 (`speed.json`: the shipped drafters, 6 prompts — 2 each from MT-Bench, HumanEval
  and the held-out set —, 128 tokens, two threads; per-run range 0.62–2.36×; not measured on an AMD EPYC). There the
  acceptance length is only ~1.9–2.0, and verifying k + 1 tokens costs about 1.3–1.4 plain steps. **Adaptive
  drafting** (end the chain after a draft the drafter gave less than 0.3) skips verifying drafts that would mostly be
  rejected: EAGLE-3.1 1.36× (pooled over all tokens 1.38×, against 1.24× at fixed k), EAGLE-3 1.31×; the slowest
  EAGLE-3.1 run was still below plain decoding. On the drift study's short held-out answers EAGLE-3 reached 1.41×
  and EAGLE-3.1 1.39× at k = 4 (one pass: indicative only).
- **EAGLE can be slower than plain decoding.** At ~4k prompt tokens (Python source before a question) both drafters
  were, at k = 8: 0.89× for EAGLE-3 and 0.99× for EAGLE-3.1; under the unfamiliar `llama3` template EAGLE-3 ran at
  0.80×. On prompts unlike the drafters' training data, such as long essays or prompts in other languages, EAGLE can
  be slower than plain decoding too: fewer guesses are accepted, and every rejected one still costs verification.
  The Speed chart shows this run's measured figure, never an estimate.

### Our engine and vLLM
The same pair runs on two engines here: **ours** (the microscope: only it shows drift, RMS and draft probabilities)
and **vLLM**, the engine EAGLE-3.1 ships in, through its CPU build (preset `smollm2-135m-vllm`; in Compare, each
side's *engine*). Both give the same greedy tokens. vLLM starts an engine per drafter and k on first use (about a
minute on 2 cores, then it is kept) and on a 2-core machine binds its worker to one core. Our engine decodes Llama
targets on the CPU through its own fast path (the same weights and, in float32, the same logits as transformers;
a preallocated cache; weights packed for the verification's k + 1 rows). Measured by
`python -m playground bench-engines` (`assets/bench/engines-cpu/`): per-user tok/s is a request's tokens / its
wall time (the median over requests), with C requests in flight at a time; speedup is over the same engine's plain
decoding at the same C; the instrumented rows record drift, RMS and draft probabilities, as the Chat tab does.
The table below was measured on the pair before its long-context stage (step 1840) and has not been re-run on the
shipped drafters, nor on an AMD EPYC (AVX2 only), where the two engines' order may differ. Its speedups sit below the
1.20× / 1.11× above because its prompts are MT-Bench's alone, the set on which our drafters accept least (acceptance
length ~1.6 there, ~2 on the mixed set), and because it is another pair; the live Chat and Compare tabs measure
this machine, now.

**Precision.** The default is float32. The preset `smollm2-135m-bf16` runs the target in bfloat16: on a CPU with
bf16 instructions (AVX-512 BF16 or AMX) our engine verifies drafts row-exactly there, so greedy speculation stays
token-identical to plain bf16 decoding; elsewhere the run's status says it is not. Every run says its precision.

{committed_section()}
### Kimi K2.6's architecture, at toy size
The presets `kimi-tiny` (our engine) and `kimi-tiny-vllm` run a 37 M-parameter DeepSeek-V3 model — Kimi K2's
multi-head latent attention and a mixture of experts — with MLA EAGLE-3 and EAGLE-3.1 drafters in the layout vLLM's
`deepseek_eagle3` reads. Its text loops and is often wrong; it is there to show the MLA drafter path. Both engines
give the same tokens (12 of 12 held-out prompts at k = 3), with acceptance length, ours / vLLM, 3.372 / 3.379 for
EAGLE-3 and 3.432 / 3.462 for EAGLE-3.1. Our engine's evaluation at k = 3: EAGLE-3 3.09, EAGLE-3.1 3.35. EAGLE-3's
carried state grows with depth (RMS 7.8 → 13.4) while EAGLE-3.1's stays near 1, and under the unfamiliar `llama3`
template EAGLE-3.1 keeps far more of its acceptance length (2.92× EAGLE-3's at k = 8). The real Kimi K2.6 on 4 GPUs
is not verified here: see docs/kimi.md.

### Metric definitions (vLLM's)
- {MEAN_ACCEPTANCE_LENGTH_HELP}
- Per-position acceptance rate = drafts accepted at position *i* / drafting steps.
- {DRAFT_ACCEPTANCE_RATE_HELP}
- Speedup = the run's decode rate (tokens after the first / decode-loop time after the first step) / plain
  decoding's, timed on the same machine, on the run's own text, one step at a time between the answer's steps at the
  position it has reached. In Chat this takes at most a tenth of the answer's decode time (the note under the cards
  says how much), so the answer itself streams at nearly the engine's speed. In Compare, both sides and plain
  decoding take turns step by step, and both sides read that one baseline: machine noise hits all three alike. The
  timed steps are pooled into groups of at least four; the range sets the answer's slowest stretch against the
  fastest group and its fastest stretch against the slowest group. **A run is called faster than another (or than
  plain decoding) only where the ranges do not overlap**; otherwise the verdict says *within noise on this machine*,
  next to what did differ beyond noise (acceptance length, verified tokens per step, acceptance by position).
  Timings count only the decode loop: pauses while the page renders or while the other side of a comparison steps
  are left out. The *tok/s seen* card puts them back: the rate you actually watched.
"""


def build_app(load_problem: str | None = None) -> gr.Blocks:
    """The whole UI. `load_problem` (why the default preset's models did not load at start-up) shows in a banner."""
    preset = get_preset(default_preset_name())
    with gr.Blocks(title="EAGLE Playground") as demo:
        gr.Markdown("# EAGLE Playground\nSpeculative decoding, live: **EAGLE-3 vs EAGLE-3.1** drafters. Coloured "
                    "tokens came from accepted drafts; plain ones are the target's own.", elem_id="header")
        if load_problem:
            gr.Markdown(f"**{html.escape(preset.title)}: not everything loaded** (runs that need it will say so): "
                        f"{html.escape(load_problem)}", elem_id="load-problem")
        with gr.Tabs():
            with gr.Tab("Chat", id="chat-tab"):
                chat_menu, pair_panel = build_chat_tab(preset, demo)
            with gr.Tab("Compare", id="compare-tab"):
                compare_menu = build_compare_tab(preset)
            with gr.Tab("Benchmark", id="bench-tab"):
                bench_menu = build_bench_tab(preset)
            with gr.Tab("About", id="about-tab"):
                gr.Markdown(ABOUT)
        wire_pair_panel(pair_panel, [chat_menu, compare_menu, bench_menu])
        demo.unload(_forget_session)
    return demo


def _forget_session(request: gr.Request) -> None:
    STOP_SWITCHES.forget(session_id(request))
    LINE.forget(session_id(request))


__all__ = ["APP_CSS", "THEME", "build_app"]
