"""A link to a chat answer: the page's address with the prompt and the run's settings as query parameters, and the
reading of such a link back into settings. A greedy answer repeats token for token from the link (on the same kind
of machine); a sampled one where the run had a seed. The link carries the last prompt only, not earlier turns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from urllib.parse import urlencode

from playground.drafting import PARAMETERS
from playground.presets import is_own_pair

from .run_settings import RequestError, RunSettings

MAX_LINK_PROMPT = 2000  # characters: longer prompts make addresses that browsers and servers cut
ALWAYS = ("preset", "drafter", "k")  # named even at their defaults: the defaults may change, the link should not
PARSERS: dict[str, Callable[[str], object]] = {  # how a link's text becomes each RunSettings field
    "drafter": str, "k": int, "preset": str, "temperature": float, "top_p": float, "max_new_tokens": int,
    "chat_template": str, "system": str, "seed": int, "min_draft_prob": float, "tree_nodes": int,
    "k_auto": lambda text: text == "True", "method_settings": lambda text: _method_settings(text),
}


def _method_settings(text: str) -> tuple[tuple[str, int | float], ...]:
    """'suffix_decoding_max_tree_depth:32,…' as (name, value) pairs (a name the registry lacks is refused where the
    settings are checked)."""
    pairs = [item.partition(":") for item in text.split(",") if item]
    return tuple((name, int(value) if name in PARAMETERS and PARAMETERS[name][1].whole else float(value))
                 for name, _, value in pairs)


def _link_text(name: str, value: object) -> object:
    return ",".join(f"{n}:{v}" for n, v in value) if name == "method_settings" else value


def link_problem(prompt: str, settings: RunSettings) -> str | None:
    """Why this answer can have no link, or None."""
    if len(prompt) > MAX_LINK_PROMPT:
        return "its prompt is too long for an address"
    if is_own_pair(settings.preset):
        return "it ran on a pair loaded in this session, and a link opens a new one (load the pair there, then Send)"
    return None


def share_query(prompt: str, settings: RunSettings) -> str | None:
    """'?prompt=…&preset=…' for this prompt and settings, or None where link_problem says there can be no link."""
    if link_problem(prompt, settings):
        return None
    defaults = asdict(RunSettings(preset=settings.preset))
    chosen = {name: _link_text(name, value) for name, value in asdict(settings).items()
              if value is not None and (name in ALWAYS or value != defaults[name])}
    return "?" + urlencode({"prompt": prompt, **chosen})


def settings_from_query(query: Mapping[str, str]) -> tuple[str | None, RunSettings | None]:
    """(the prompt, the settings) a link names; (None, None) for an address without them. RequestError, in one line,
    for a link whose settings cannot run here (checked as a run's would be)."""
    given = {name: value for name, value in query.items() if name == "prompt" or name in PARSERS}
    if not given:
        return None, None
    prompt = given.pop("prompt", None)
    if prompt is not None and len(prompt) > MAX_LINK_PROMPT:
        raise RequestError(f"the link's prompt is {len(prompt)} characters; a link carries at most {MAX_LINK_PROMPT}")
    if is_own_pair(given.get("preset", "")):  # loaded in its sender's session, which a visitor cannot reach
        raise RequestError(f"the link names a pair loaded in another session ({given['preset']}): load that pair "
                           f"under 'Your own pair', then send the prompt")
    values = {}
    for name, text in given.items():
        try:
            values[name] = PARSERS[name](text)
        except ValueError:
            raise RequestError(f"the link's {name}={text!r} is not a number") from None
    settings = RunSettings(**values)
    settings.checked_preset()
    return prompt, settings
