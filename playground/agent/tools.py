"""What an agent asks the playground, as plain functions: answer a prompt (and what it bought over plain decoding),
compare two configurations on one prompt, replay an answer under every method, and the machine's facts.

Each runs on the model line it is given (the app's, ui.line.LINE: one run at a time as the UI's are, within the
UI's bounds); a bad input raises ValueError with one sentence, which the MCP server hands back as the tool's
error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict

from playground.backends import shared_backend
from playground.bench.landing import landing_records, nearest_record
from playground.bench.replay import replay_run
from playground.drafting import PLAIN, offered_methods
from playground.environment import public_host
from playground.machine import cpu_kind, kind_words, machine_info
from playground.playback import Conversation, EngineLine, RequestError, Run, RunSettings, chat_turn, compare
from playground.presets import DRAFTER_LABELS, default_preset_name, get_preset, presets
from playground.request.check import ANY_METHOD
from playground.viz import plain_verdict

MAX_TOOL_TOKENS = 512  # an agent's answer is capped below the UI's 1024: a tool call should return within a minute
PUBLIC_MAX_TOOL_TOKENS = 256  # on a public host (a Space), where one visitor's call holds the model for everyone
_AGENT = "agent"  # the line's session key for tool calls


def _settings(method: str, k: int | str, max_new_tokens: int, temperature: float, preset: str | None) -> RunSettings:
    cap = PUBLIC_MAX_TOOL_TOKENS if public_host() else MAX_TOOL_TOKENS
    if not 1 <= max_new_tokens <= cap:
        raise ValueError(f"max_new_tokens must be between 1 and {cap} for a tool call (got {max_new_tokens})")
    name = preset or default_preset_name()
    offered = presets()
    if name not in offered:
        raise ValueError(f"unknown preset {name!r}; this app offers: {', '.join(offered)}")
    method = PLAIN if method in ("plain", "none") else method
    k_auto = k == "auto"
    if not k_auto and not isinstance(k, int):
        raise ValueError(f"k must be a whole number or 'auto' (got {k!r})")
    if method == ANY_METHOD and not k_auto:
        raise ValueError("method 'auto' chooses k too: pass k='auto', or name a method for a fixed k")
    return RunSettings(drafter=method, k=1 if k_auto else k, preset=name, temperature=temperature,
                       max_new_tokens=max_new_tokens, k_auto=k_auto and method != PLAIN)


class ModelLine:
    """The line the tools' runs hold a place on, and what to do after each (the app's: give freed memory back)."""

    def __init__(self, line: EngineLine | None = None, after_run: Callable[[], object] = lambda: None) -> None:
        self.line, self.after_run = line or EngineLine(1), after_run

    def held(self, what: str, work: Callable[[], dict]) -> dict:
        """`work()` holding a place on the line, as the UI's runs do (tool calls wait for each other and for them)."""
        tab = f"tool-{threading.get_ident()}"
        with self.line.slot(_AGENT, tab, what):
            try:
                return work()
            except RequestError as err:
                raise ValueError(str(err)) from None
            finally:
                self.after_run()


def summary(run: Run) -> dict:
    """One run as an agent reads it: the answer, which method and k ran on which weights, its rate, its measured
    speedup over plain decoding with the 95 % interval and the verdict, and its acceptance."""
    view = run.view()
    m, verdict = view.metrics, plain_verdict(view)
    timed = not view.plain  # plain decoding is the baseline, never rated against itself
    return {"text": run.text, "method": run.settings.drafter, "method_label": view.drafter, "k": view.k,
            "k_auto": run.auto_k.why if run.auto_k else None, "status": run.status,
            "error": run.error, "tokens": m.generated_tokens, "prompt_tokens": run.prompt_tokens,
            "tokens_per_second": m.decode_tokens_per_second, "speedup": view.speedup if timed else None,
            "speedup_range": list(view.speedup_range) if timed and view.speedup_range else None,
            "speedup_not_measured": view.too_few_steps if timed else "plain decoding is the baseline",
            "verdict": verdict.sentence if verdict else None,
            "mean_acceptance_length": m.mean_acceptance_length,
            "acceptance_by_position": m.per_position_acceptance, "engine": run.engine,
            "weights": run.fields.get("weights"), "precision": run.fields.get("precision"),
            "cpu_kind": cpu_kind()}


def _finished(runs):
    """The last state a run's generator yields: the finished run (or comparison)."""
    final = None
    for final in runs:  # noqa: B007 - the loop keeps the last one
        continue
    return final


def answer(line: ModelLine, prompt: str, method: str = ANY_METHOD, k: int | str = "auto", max_new_tokens: int = 128,
           temperature: float = 0.0, preset: str | None = None) -> dict:
    settings = _settings(method, k, max_new_tokens, temperature, preset)
    conversation = Conversation()
    return line.held("agent's answer", lambda: summary(_finished(chat_turn(conversation, prompt, settings, bool))))


def compare_two(line: ModelLine, prompt: str, left_method: str, right_method: str, left_k: int | str = "auto",
                right_k: int | str = "auto", max_new_tokens: int = 128, preset: str | None = None) -> dict:
    left = _settings(left_method, left_k, max_new_tokens, 0.0, preset)
    right = _settings(right_method, right_k, max_new_tokens, 0.0, preset)

    def work() -> dict:
        comparison = _finished(compare(prompt, left, right, bool))
        return {"left": summary(comparison.left), "right": summary(comparison.right),
                "shared_baseline": comparison.shared_baseline, "verdict": comparison.verdict().sentence}

    return line.held("agent's comparison", work)


def replay(line: ModelLine, prompt: str, max_new_tokens: int = 128, preset: str | None = None) -> dict:
    settings = _settings(PLAIN, 1, max_new_tokens, 0.0, preset)
    if get_preset(settings.preset).backend != "local":
        raise ValueError(f"replay runs on our engine; preset {settings.preset!r} runs on "
                         f"{get_preset(settings.preset).backend}")

    def work() -> dict:
        run = _finished(chat_turn(Conversation(), prompt, settings, bool))
        rows, sentence, _ = replay_run(shared_backend(get_preset(settings.preset)), run)
        configs = [{**asdict(r), "method_label": DRAFTER_LABELS.get(r.drafter, r.drafter)} for r in rows]
        priced = [c for c in configs if c["predicted_speedup"] is not None]
        best = max(priced, key=lambda c: c["predicted_speedup"], default=None)
        pays = best is not None and best["predicted_range"] is not None and best["predicted_range"][0] > 1
        recommended = ({"method": best["drafter"], "k": best["k"], "tree_nodes": best["tree_nodes"],
                        "predicted_speedup": best["predicted_speedup"]} if pays
                       else {"method": PLAIN, "k": None, "tree_nodes": 0, "predicted_speedup": 1.0})
        return {"text": run.text, "tokens": len(run.token_ids), "plain_tokens_per_second":
                run.view().metrics.decode_tokens_per_second, "configs": configs, "recommended": recommended,
                "why": sentence, "cpu_kind": cpu_kind()}

    return line.held("agent's replay", work)


def machine_facts() -> dict:
    kind = cpu_kind()
    nearest = nearest_record(landing_records(), kind)
    figures = None
    if nearest is not None:
        figures = {"cpu_kind": nearest["cpu_kind"], "date": nearest["date"], "same_kind": nearest["cpu_kind"] == kind,
                   "rows": [{key: row.get(key) for key in ("drafter", "prompt_set", "k", "k_auto", "speedup",
                                                            "mean_acceptance_length")}
                            for row in nearest["rows"] if row.get("speedup") is not None]}
    offered = []
    for name, preset in presets().items():
        offered.append({"name": name, "engine": preset.backend, "target": preset.target,
                        "methods": offered_methods(preset.backend, preset.drafters)})
    machine = machine_info("cpu")
    if public_host():
        machine = {key: machine.get(key) for key in ("cpu", "cores", "memory_gb", "cpu_flags")}
    return {"cpu_kind": kind, "cpu_kind_words": kind_words(kind), "machine": machine,
            "default_preset": default_preset_name(), "presets": offered, "committed_figures_nearest": figures}
