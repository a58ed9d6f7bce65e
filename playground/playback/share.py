"""A link to a chat answer: the page's address with the prompt and the run's settings as query parameters, and the
reading of such a link back into settings. A greedy answer repeats token for token from the link (on the same kind
of machine); a sampled one where the run had a seed. The link carries the last prompt only, not earlier turns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from urllib.parse import urlencode

from .settings import RequestError, RunSettings

MAX_LINK_PROMPT = 2000  # characters: longer prompts make addresses that browsers and servers cut
ALWAYS = ("preset", "drafter", "k")  # named even at their defaults: the defaults may change, the link should not
TYPES = {f.name: f.type for f in fields(RunSettings)}


def share_query(prompt: str, settings: RunSettings) -> str | None:
    """'?prompt=…&preset=…' for this prompt and settings, or None where the prompt is too long for an address."""
    if len(prompt) > MAX_LINK_PROMPT:
        return None
    defaults = asdict(RunSettings(preset=settings.preset))
    chosen = {name: value for name, value in asdict(settings).items()
              if value is not None and (name in ALWAYS or value != defaults[name])}
    return "?" + urlencode({"prompt": prompt, **chosen})


def settings_from_query(query: Mapping[str, str]) -> tuple[str | None, RunSettings | None]:
    """(the prompt, the settings) a link names; (None, None) for an address without them. RequestError, in one line,
    for a link whose settings cannot run here (checked as a run's would be)."""
    given = {name: value for name, value in query.items() if name == "prompt" or name in TYPES}
    if not given:
        return None, None
    prompt = given.pop("prompt", None)
    if prompt is not None and len(prompt) > MAX_LINK_PROMPT:
        raise RequestError(f"the link's prompt is {len(prompt)} characters; a link carries at most {MAX_LINK_PROMPT}")
    values = {}
    for name, text in given.items():
        kind = TYPES[name]
        try:
            values[name] = int(text) if "int" in kind else float(text) if "float" in kind else text
        except ValueError:
            raise RequestError(f"the link's {name}={text!r} is not a number") from None
    settings = RunSettings(**values)
    settings.checked_preset()
    return prompt, settings
