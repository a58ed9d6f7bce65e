"""The sampling a request gets for the fields it leaves out, chosen as vLLM chooses it (`--generation-config`,
`--override-generation-config`).

OpenAI clients send no temperature unless asked to, so without model defaults every such request samples at
temperature 1.0, which small instruction models answer with nonsense ("What is 2+2?" → "6" on SmolLM2-135M). In
order, each later source replacing the fields it sets:
1. OpenAI's defaults: temperature 1.0, top_p 1.0;
2. with `--generation-config auto` (the default): what the model recommends — the `temperature` and `top_p` of the
   `generation_config.json` in the target's folder, or, where that sets neither, the preset's shipped defaults (the
   default pair: its model card's temperature 0.2, top_p 0.9); `--generation-config vllm` skips this step;
3. `--override-generation-config '{"temperature": 0.5}'`.
The start-up line and `/v1/models` say which values apply and where they came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from playground.engine.config import temperature_problem, top_p_problem

OPENAI = {"temperature": 1.0, "top_p": 1.0}
FIELDS = tuple(OPENAI)


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float
    top_p: float
    source: str  # where the values came from, for the start-up line and /v1/models

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"temperature {self.temperature:g}, top_p {self.top_p:g} ({self.source})"


def parse_override(text: str | None) -> dict[str, float]:
    """`--override-generation-config`'s JSON object, of the fields this server samples with."""
    if not text:
        return {}
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--override-generation-config is not JSON: {err.msg}") from None
    if not isinstance(values, dict):
        raise ValueError("--override-generation-config takes a JSON object, e.g. '{\"temperature\": 0.5}'")
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ValueError(f"--override-generation-config: this server samples with {', '.join(FIELDS)} only, not "
                         f"{', '.join(unknown)}")
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"--override-generation-config: {name} must be a number, got {value!r}")
    problem = temperature_problem(values.get("temperature", 0)) or top_p_problem(values.get("top_p", 1))
    if problem:
        raise ValueError(f"--override-generation-config: {problem}")
    return {name: float(value) for name, value in values.items()}


def model_recommends(folder: str) -> dict[str, float]:
    """The sampling fields a model folder's generation_config.json sets ({} where it has none, or is a Hub id)."""
    path = Path(folder) / "generation_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {name: float(config[name]) for name in FIELDS
            if isinstance(config.get(name), (int, float)) and not isinstance(config.get(name), bool)}


def sampling_defaults(folder: str, shipped: dict[str, float], mode: str = "auto",
                      override: dict[str, float] | None = None, shipped_source: str = "the preset's model card"
                      ) -> SamplingDefaults:
    """The defaults for requests that leave sampling fields out (module docstring for the order)."""
    if mode not in ("auto", "vllm"):
        raise ValueError(f"--generation-config must be auto or vllm, got {mode!r}")
    values, source = dict(OPENAI), "OpenAI's defaults"
    if mode == "auto":
        recommended = model_recommends(folder)
        if recommended:
            values, source = {**values, **recommended}, "the model's generation_config.json"
        elif shipped:
            values, source = {**values, **shipped}, shipped_source
    if override:
        values, source = {**values, **override}, f"--override-generation-config over {source}"
    return SamplingDefaults(values["temperature"], values["top_p"], source)
