"""`k auto`: the k predicted fastest for a preset drafter on this machine — its acceptance by position (the
evaluation.json shipped beside the drafters, updated with the session's own earlier answers replayed, where there
are any) priced at this machine's step costs for the pair (engine/costs.py, measured once per machine, pair,
context and load, then kept) — or plain decoding where no k pays. One home for the choice `generate`, `serve`, the
bench and the app make.

With the drafter `auto` (request.ANY_METHOD) it chooses the method too, among the preset's EAGLE drafters and the
weightless methods (prompt lookup, suffix decoding), or among those a comma list names (`eagle3.1,ngram,suffix`).
The evidence is text this pair wrote for this prompt: the first PROBE_TOKENS tokens of the answer, decoded plainly
before the run (a second or so), with the session's earlier answers. A weightless method's proposals depend on the
text alone, so replaying it over them (each position proposed from the prompt and the answer before it) gives the
steps a greedy run would take, each priced at the target's verification alone; each EAGLE drafter's shipped
acceptance is updated with them replayed, as above. The prompt's own repetition alone (each prompt position
proposed from the tokens before it) was tried and left: on a prompt that asks for a given function back with one
name changed, it predicted prompt lookup at 1.3x where the live run accepted 4.7 tokens a step — the copy is in
the answer, not in the prompt. A weightless method asked by name with k auto gets its k the same way."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from playground.backends import Backend
from playground.backends.local import LocalBackend
from playground.drafting import PLAIN, method_for
from playground.engine import GenerationConfig, SpecCounters, StepEvent
from playground.engine.choice import AutoK, Candidate, choose_k, choose_method, expected_tokens
from playground.engine.cost_measure import machine_busy, pair_profile
from playground.engine.costs import CostProfile
from playground.engine.decode import plain_generate
from playground.engine.loop import prompt_problem
from playground.engine.replay import Forced, forced_from_run, replay, teacher_force
from playground.engine.target import KeptPrefix
from playground.engine.weightless import proposer_for
from playground.presets import repo_relative
from playground.request.check import candidates, chosen_among, own_settings, shipped_rates
from playground.smollm2 import cache_root

PRIOR_STEPS = 8  # the shipped acceptance weighs as much as this many drafting steps of the session's own answers:
# it was measured on held-out prompts from the training collections, and over-predicted chat 1.6-1.9x where runs
# measured 0.64-0.94x (64 steps here then; hidden chat prompts, Zen 4, docs/benchmarks.md)
SESSION_ANSWERS = 4  # the session's latest greedy answers replayed, at most (each costs a target pass over it)
MOST_K = 8  # the deepest k k auto prices (the cost profile's deepest chain)
PROBE_TOKENS = 32  # choosing among methods: this answer's first tokens, decoded plainly, are the evidence
Answer = tuple[Sequence[int], Sequence[int]]  # (prompt ids, answer ids) of a finished greedy answer
Settings = tuple[tuple[str, int | float], ...]  # method settings by name (GenerationConfig.method_settings)
_replayed: OrderedDict[tuple, tuple[int, list[int]]] = OrderedDict()  # (pair, drafter, k, answer) -> counts


def replayed_counts(backend: LocalBackend, drafter: str, k: int, answer: Answer) -> tuple[int, list[int]]:
    """(drafting steps, accepted at positions 1..k) of a greedy answer replayed under `drafter` at k
    (engine/replay.py: the steps a live run would have taken); each answer replayed once (the last 256 kept)."""
    prompt_ids, answer_ids = answer
    loaded = backend.drafter(drafter)

    def counted() -> tuple[int, list[int]]:
        forced = _forced(backend, loaded.aux_layers, prompt_ids, answer_ids)
        counts = SpecCounters.from_events(replay(forced, backend.target, loaded.drafter, k,
                                                          acceptance_only=True), k)
        return counts.drafts, counts.accepted_per_pos

    key = (backend.preset.name, backend.preset.target, drafter, k, tuple(prompt_ids), tuple(answer_ids))
    return _remembered(_replayed, key, 256, counted)


_teacher_forced: OrderedDict[tuple, object] = OrderedDict()  # (target, aux layers, answer) -> teacher_force's pass


def _forced(backend: LocalBackend, aux_layers: list[int], prompt_ids: Sequence[int], answer_ids: Sequence[int],
            made: Forced | None = None):
    """The target's pass over an answer (teacher_force, or `made` where the answer's own run kept it), once for every
    drafter reading the same layers (the last 4 kept)."""
    key = (backend.preset.target, tuple(aux_layers), tuple(prompt_ids), tuple(answer_ids))
    return _remembered(_teacher_forced, key, 4, lambda: made or teacher_force(backend.target, aux_layers,
                                                                              list(prompt_ids), list(answer_ids)))


def _remembered(table: OrderedDict, key: tuple, most: int, make: Callable[[], object]):
    """`make()` computed once per key, the `most` last used kept."""
    if key not in table:
        table[key] = make()
        while len(table) > most:
            table.popitem(last=False)
    table.move_to_end(key)
    return table[key]


def updated_acceptance(shipped: list[float], counts: list[tuple[int, list[int]]]) -> list[float]:
    """The shipped acceptance by position updated with the session's replayed answers: at each position, their
    accepted drafts and drafting steps added to the shipped rate weighted as PRIOR_STEPS steps."""
    steps = sum(n for n, _ in counts)
    return [(rate * PRIOR_STEPS + sum(accepted[i] for _, accepted in counts)) / (PRIOR_STEPS + steps)
            for i, rate in enumerate(shipped)]


def auto_k(backend: LocalBackend, drafter: str, context_ids: list[int], tokens: int,
           announce: Callable[[str], None] | None = None, profile: CostProfile | None = None,
           session: Sequence[Answer] = (), settings: Settings = ()) -> AutoK:
    """The choice for `drafter` of the backend's preset at a context of `tokens` (its step costs measured over
    `context_ids` repeated to that length, or `profile` where the caller measured them), its acceptance updated with
    the latest SESSION_ANSWERS of `session` (the session's earlier greedy answers on this pair) replayed; ValueError
    where it cannot choose (a drafter given as a folder, or one without an acceptance by position), worded to follow
    k's name ("--k " + message, "k " + message). A choice among methods (ANY_METHOD, a comma list) or a weightless
    method: `auto_method`, whose `context_ids` are the prompt, each weightless method replayed with its own of the
    request's method `settings` (GenerationConfig.method_settings; the registry's defaults for the rest)."""
    problem = prompt_problem(len(context_ids), backend.target.max_positions)
    if problem:  # refused before any step is timed, in the words the run itself would refuse with
        raise ValueError(problem)
    if chosen_among(drafter) or method_for(drafter).priced_by == "replay":
        methods = candidates(backend.preset, drafter) if chosen_among(drafter) else [drafter]
        return auto_method(backend, methods, context_ids, tokens, announce, session, settings)
    answers = latest(session)
    per_position, source = eagle_acceptance(backend, drafter, answers, session_words(answers))
    since = time.time()
    profile = profile or drafter_profile(backend, drafter, context_ids, tokens, announce)
    return choose_k(profile, per_position, source, since=since)


def latest(session: Sequence[Answer]) -> list[Answer]:
    """The session's latest SESSION_ANSWERS answers with something to replay (more than the prefill's token)."""
    return [a for a in session if len(a[1]) > 1][-SESSION_ANSWERS:]


def session_words(answers: Sequence[Answer]) -> str:
    return f"this session's last {len(answers)} answer{'s' * (len(answers) > 1)}" if answers else ""


def eagle_acceptance(backend: LocalBackend, drafter: str, answers: Sequence[Answer],
                     described: str) -> tuple[list[float], str]:
    """A preset drafter's acceptance by position as shipped, updated with `answers` (`described` so) replayed, and
    where it came from."""
    per_position, evaluation = shipped_rates(backend.preset, drafter)
    source = repo_relative(evaluation)
    if answers:
        counts = [replayed_counts(backend, drafter, len(per_position), a) for a in answers]
        per_position = updated_acceptance(per_position, counts)
        source += f", updated with {described} replayed ({sum(n for n, _ in counts)} drafting steps)"
    return per_position, source


def drafter_profile(backend: LocalBackend, drafter: str, context_ids: list[int], tokens: int,
                    announce: Callable[[str], None] | None = None,
                    busy: Callable[[], bool | None] = machine_busy) -> CostProfile:
    """This machine's step costs for the preset's target and `drafter` (pair_profile: measured once, then kept);
    `busy` reads the machine's load (a choice among drafters reads it once for all)."""
    loaded = backend.drafter(drafter)
    return pair_profile(backend.target, loaded.drafter, loaded.aux_layers, (backend.preset.target, loaded.source),
                        context_ids, tokens, cache_root(), announce=announce, busy=busy)


def probe_answer(backend: LocalBackend, prompt_ids: list[int],
                 aux_layers: list[int] | None = None) -> list[StepEvent]:
    """The step events of this prompt's greedy answer's first PROBE_TOKENS tokens, decoded plainly: the text a method
    would be checked against, which a weightless method's proposals (read from the prompt) and a drafter's are
    replayed on; a greedy answer goes on from them (`answer_stream`), from the probe's own cache (`keep_prefix`).
    Where `aux_layers` are given, the target's states there are kept as the decoding computed them, for the drafters'
    replays (no second pass over the text)."""
    cfg = GenerationConfig(max_new_tokens=PROBE_TOKENS, k=1, instrument=False)
    backend.warm_up(prompt_ids, PLAIN)
    kept: list[KeptPrefix] = []
    events = list(plain_generate(backend.target, prompt_ids, cfg, aux_layers=aux_layers, keep=kept.append))
    answer = [token for event in events for token in event.emitted]
    if kept:
        backend.target.keep_prefix(kept[0])
        if aux_layers and kept[0].aux is not None and len(answer) > 1:
            _forced(backend, aux_layers, prompt_ids, answer, forced_from_run(prompt_ids, answer, [kept[0].aux]))
    return events


def reusable_probe(auto: AutoK | None, cfg: GenerationConfig) -> list[StepEvent]:
    """The probe's steps where the answer can go on from them, or is them: a greedy answer (the probe is plain greedy
    decoding's own start) with no stop string to look for in it, whose probe ran to its budget (and the answer's is
    longer) or ended the answer (end of sequence within the answer's budget)."""
    probe = list(auto.probe) if auto is not None else []
    tokens = sum(len(e.emitted) for e in probe)
    if not probe or not cfg.greedy or cfg.stop_strings:
        return []
    ended = probe[-1].finish_reason == "eos" and tokens <= cfg.max_new_tokens
    return probe if ended or (probe[-1].finish_reason == "length" and cfg.max_new_tokens > tokens) else []


class ContinuedStream:
    """An answer's step events: the probe's plain steps as they were timed, then the chosen method's run from the
    prompt and the probe's tokens (its prefill over them is a step of the answer), its steps, tokens and times
    counted on from the probe's. A stream as `Backend.stream` returns one (`close`)."""

    def __init__(self, probe: list[StepEvent], rest: Iterator[StepEvent] | None) -> None:
        last = probe[-1]  # rest None: the probe was the whole answer
        self._probe = probe if rest is None else [*probe[:-1], dataclasses.replace(last, finished=False,
                                                                                   finish_reason=None)]
        self._rest = iter(()) if rest is None else rest
        self._steps, self._ms, self._tokens = len(probe), last.elapsed_ms, last.total_tokens
        self.live = False  # whether the last step returned is the run's own (its clock runs while it is paused)

    def __iter__(self) -> Iterator[StepEvent]:
        return self

    def __next__(self) -> StepEvent:
        if self._probe:
            return self._probe.pop(0)
        event = next(self._rest)
        self.live = True
        return dataclasses.replace(event, step=event.step + self._steps, elapsed_ms=event.elapsed_ms + self._ms,
                                   total_tokens=event.total_tokens + self._tokens)

    def close(self) -> None:
        close = getattr(self._rest, "close", None)
        if close is not None:
            close()


def answer_stream(backend: Backend, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
                  should_stop: Callable[[], bool] | None = None, session: str | None = None,
                  auto: AutoK | None = None):
    """The answer's step events: `backend.stream`, or, where k auto decoded the answer's first tokens plainly to
    choose (`reusable_probe`), those steps and then the chosen method going on from them, so the choice costs one
    prefill over them rather than those tokens decoded again (nothing more where the answer ended within them).
    Greedy output is plain decoding's either way."""
    probe = reusable_probe(auto, cfg)
    if not probe:
        return backend.stream(prompt_ids, drafter, cfg, should_stop, session=session)
    if probe[-1].finish_reason == "eos":  # the answer ended within the probe: it is the answer
        return ContinuedStream(probe, None)
    tokens = [t for e in probe for t in e.emitted]
    rest = backend.stream([*prompt_ids, *tokens], drafter,
                          dataclasses.replace(cfg, max_new_tokens=cfg.max_new_tokens - len(tokens)), should_stop,
                          session=session)
    return ContinuedStream(probe, rest)


def auto_method(backend: LocalBackend, methods: list[str], prompt_ids: list[int], tokens: int,
                announce: Callable[[str], None] | None = None, session: Sequence[Answer] = (),
                settings: Settings = ()) -> AutoK:
    """The method of `methods` and k predicted fastest (or plain decoding), each at this machine's step costs at a
    context of `tokens`: the module's docstring. The evidence is the session's latest answers and this answer's
    first PROBE_TOKENS tokens (`probe_answer`), replayed under each method."""
    # the load read once for every profile, in 4 reads (30 ms) rather than 10 per profile, before the probe decodes
    # (read from the probe's own steps instead, an idle machine with a browser rendering beside it read busy): the
    # choice is made before each answer, and its own cost is the answer's
    since, busy = time.time(), functools.cache(lambda: machine_busy(samples=4, interval_s=0.01))
    eagles = [name for name in methods if method_for(name).priced_by == "acceptance"]
    profiles = {name: drafter_profile(backend, name, prompt_ids, tokens, announce, busy)
                for name in methods if method_for(name).priced_by == "acceptance"}
    target_costs = next(iter(profiles.values()), None)  # whose plain and verification costs price weightless steps
    if target_costs is None:
        target_costs = drafter_profile(backend, next(iter(backend.preset.drafters)), prompt_ids, tokens, announce,
                                       busy)
    answers = latest(session)
    if announce is not None:
        announce(f"decoding this answer's first {PROBE_TOKENS} tokens plainly: each method is replayed on them…")
    probe_events = probe_answer(backend, list(prompt_ids), backend.drafter(eagles[0]).aux_layers if eagles else None)
    probe = [token for event in probe_events for token in event.emitted]
    evidence = [*answers, (list(prompt_ids), probe)] if len(probe) > 1 else answers
    described = " and ".join(filter(None, (session_words(answers), f"this answer's first {len(probe)} tokens "
                                                                    "(decoded plainly to choose)")))
    candidates = [weightless_candidate(name, target_costs, evidence, described, settings)
                  if method_for(name).priced_by == "replay"
                  else eagle_candidate(backend, name, profiles[name], evidence, described) for name in methods]
    return dataclasses.replace(choose_method(candidates, target_costs.load_text(since)), probe=tuple(probe_events))


def eagle_candidate(backend: LocalBackend, drafter: str, profile: CostProfile, answers: Sequence[Answer],
                    described: str) -> Candidate:
    per_position, source = eagle_acceptance(backend, drafter, answers, described)
    ranged = {k: profile.expected_speedup(expected_tokens(per_position, k), k)
              for k in range(1, min(MOST_K, len(per_position), max(profile.chain)) + 1)}
    return Candidate(drafter, ranged, source, profile.plain.ms, tuple(per_position))


def weightless_candidate(method: str, profile: CostProfile, answers: Sequence[Answer], described: str,
                         settings: Settings = ()) -> Candidate:
    """A weightless method's speedup by k from the steps a greedy run would take over `answers` (each proposed from
    its prompt and the answer before it, with its own of `settings`), priced at the target's verification alone."""
    ranged = {}
    for k in range(1, MOST_K + 1):
        steps = [step for prompt, answer in answers  # the answer's first token is the prefill's, as live
                 for step in text_steps(method, k, [*prompt, *answer], len(prompt) + 1, settings)]
        ranged[k] = profile.verified_speedup(steps)
    return Candidate(method, ranged, f"its replay over {described}", profile.plain.ms)


def text_steps(method: str, k: int, tokens: list[int], start: int, settings: Settings = ()) -> list[tuple[int, int]]:
    """(rows verified, tokens emitted) of each step a greedy run of the weightless `method` at k would take over
    `tokens[start:]`, were they the target's choices: each step proposes from the tokens before it (with its own of
    `settings`, the registry's defaults for the rest), keeps the proposal's prefix that matches the text, and emits
    one token more."""
    cfg = GenerationConfig(k=k, instrument=False, method_settings=settings)
    proposer = proposer_for(method, GenerationConfig(k=k, instrument=False, method_settings=own_settings(method, cfg)))
    steps, position = [], start
    while position < len(tokens):
        drafted = proposer.propose(tokens[:position], k)[:k]
        accepted = 0
        while (accepted < len(drafted) and position + accepted < len(tokens)
               and drafted[accepted] == tokens[position + accepted]):
            accepted += 1
        steps.append((len(drafted) + 1, accepted + 1))
        position += accepted + 1
    return steps
