"""Does a drafter fit a target? Checked from the two config.json files, before vLLM is started.

vLLM does not refuse a drafter that reads the wrong layers or the wrong width: it degrades silently (vLLM #50170: 1.2 %
acceptance). The local engine checks the same things in Target.attach, in the same words (engine/target.py's fit
sentences); this is the equivalent for vLLM and remote servers, where only the configs are at hand, and for a drafter
folder given with a target folder (request/check.py), before anything loads. Aux layer ids use vLLM's convention (id i =
input of layer i, id == num_hidden_layers = the final pre-norm state).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from playground.engine.checkpoint import MLA_ARCHITECTURES, CheckpointError, aux_layer_ids
from playground.engine.target import aux_count_problem, aux_ids_problem, does_not_fit, vocab_problem, width_problem

from .availability import folder_problem, looks_like_folder

MLA_LATENT_WIDTHS = (320, 512, 576)  # kv_lora_rank + qk_rope_head_dim that vLLM's MLA kernels take


class DrafterMismatch(CheckpointError):
    """A drafter that does not fit its target; the message names every problem."""


@dataclass
class FitReport:
    problems: list[str] = field(default_factory=list)  # the drafter cannot work with this target
    warnings: list[str] = field(default_factory=list)  # it may work, but check

    def raise_if_unfit(self, drafter: str, target: str) -> None:
        if self.problems:
            raise DrafterMismatch(does_not_fit(self.problems, drafter, target))


def hub_problem(source: str, err: Exception, doing: str) -> str:
    """One line for a failed Hub request: what to do about a gated repo, a wrong id or revision, no network; else the
    error's first line."""
    kind = type(err).__name__
    if kind == "GatedRepoError":
        return (f"{source} is gated: accept its licence on huggingface.co and give the app a token (HF_TOKEN) that "
                "may read it")
    if kind == "RepositoryNotFoundError":
        return f"no model {source!r} on the Hugging Face Hub (or it is private and the app's token cannot read it)"
    if kind == "RevisionNotFoundError":
        return f"{source} has no such revision (a branch, tag or commit)"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"cannot {doing} {source!r}: {kind}" + (f": {first}" if first else "")


HUB_PROBE_S = 3.0  # how long a Hub id waits to learn whether the Hub can be reached at all


def hub_unreachable(endpoint: str | None = None, timeout_s: float = HUB_PROBE_S) -> str | None:
    """Why the Hub cannot be reached from here, found within `timeout_s` (a TCP connection to its host), or None.
    Without it a Hub id on a machine with no network waits out huggingface_hub's retries (23-24 s measured).
    Offline mode (HF_HUB_OFFLINE=1) asks nothing: the library then answers from its cache at once."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return None
    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:  # name resolution has no timeout of its own: the thread is waited for, not joined forever
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(f"{type(err).__name__}: {err}")

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if outcome and outcome[0] is None:
        return None
    why = outcome[0] if outcome else f"no answer within {timeout_s:g} s"
    return f"the Hugging Face Hub ({host}) cannot be reached from this machine ({why})"


def read_config(source: str, revision: str = "") -> dict:
    """config.json of a local folder, or of a Hub repository at `revision` (downloads that one file; HF_TOKEN for gated
    repos)."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        path = folder / "config.json"
        if not path.is_file():
            raise CheckpointError(f"no config.json in {folder}")
    elif problem := folder_problem(source):
        raise CheckpointError(problem)
    else:
        if unreachable := hub_unreachable():
            raise CheckpointError(f"cannot read config.json of {source!r}: {unreachable}; name a local folder, or "
                                  "try again when the machine is online")
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(source, "config.json", revision=revision or None))
        except Exception as err:  # hub errors come in many types; hub_problem names the ones users can act on
            raise CheckpointError(hub_problem(source, err, "read config.json of")) from None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"config.json of {source!r} is not valid JSON: {err}") from None


def stored_parameters(source: str, revision: str = "") -> dict[str, int] | None:
    """A checkpoint's parameters by stored dtype ({"BF16": 8030261248}), counted from its safetensors headers, no
    tensor read: of a local folder's *.safetensors, or of a Hub repository's (its headers only, when the Hub can be
    reached). None where there is no safetensors checkpoint to count."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        from safetensors import safe_open

        counts: dict[str, int] = {}
        for path in sorted(folder.glob("*.safetensors")):
            try:
                with safe_open(str(path), framework="pt") as tensors:
                    for name in tensors.keys():
                        piece = tensors.get_slice(name)
                        counts[piece.get_dtype()] = counts.get(piece.get_dtype(), 0) + math.prod(piece.get_shape())
            except Exception as err:  # safetensors raises its own error types for a damaged header
                raise CheckpointError(f"cannot read the safetensors header of {path}: {err}") from None
        return counts or None
    if looks_like_folder(source) or hub_unreachable():
        return None
    try:
        from huggingface_hub import get_safetensors_metadata

        return dict(get_safetensors_metadata(source, revision=revision or None).parameter_count) or None
    except Exception:  # no safetensors on the Hub (or a gated repo): the config estimate serves
        return None


def _language_config(config: dict) -> dict:
    """Multimodal wrappers (Kimi K2.5/K2.6, Llama 4, ...) keep the language model's settings in text_config."""
    return config.get("text_config") or config


def _drafter_layer(config: dict) -> dict:
    """Speculators layout keeps the draft layer's settings in transformer_layer_config."""
    return config.get("transformer_layer_config") or config


def drafter_fit(target_config: dict, drafter_config: dict) -> FitReport:
    """Compare a drafter's config.json with its target's (both as dicts)."""
    report = FitReport()
    target = _language_config(target_config)
    layer = _drafter_layer(drafter_config)
    try:
        n_layers = int(target["num_hidden_layers"])
        hidden = int(target["hidden_size"])
    except KeyError as missing:
        report.problems.append(f"target config lacks {missing.args[0]!r}")
        return report
    ids = aux_layer_ids(drafter_config)
    n_aux = int(drafter_config.get("num_aux_hidden_states") or (len(ids) if ids else 3))
    if ids is None:
        report.warnings.append(
            f"the drafter names no eagle_aux_hidden_state_layer_ids; vLLM will read layers "
            f"[2, {n_layers // 2}, {n_layers - 3}] — right only if it was trained on those")
    else:
        report.problems += [p for p in (aux_ids_problem(ids, n_layers), aux_count_problem(n_aux, len(ids))) if p]
    width = drafter_config.get("target_hidden_size") or layer.get("target_hidden_size") or layer.get("hidden_size")
    if width is None:
        report.problems.append("drafter config has neither target_hidden_size nor hidden_size")
    elif width_problem(width, hidden):
        report.problems.append(width_problem(width, hidden))
    draft_vocab, target_vocab = layer.get("vocab_size"), target.get("vocab_size")
    if draft_vocab is not None and target_vocab is not None and vocab_problem(draft_vocab, target_vocab):
        report.problems.append(vocab_problem(draft_vocab, target_vocab))
    if drafter_config.get("fc_norm") and drafter_config.get("norm_before_fc"):
        report.problems.append("drafter sets both fc_norm and norm_before_fc; they are mutually exclusive")
    if set(drafter_config.get("architectures") or []) & MLA_ARCHITECTURES:
        _check_mla(target, layer, report)
    return report


def _check_mla(target: dict, drafter: dict, report: FitReport) -> None:
    """An MLA drafter (vLLM's deepseek_eagle3) runs its attention on the target's MLA backend."""
    if not target.get("kv_lora_rank"):
        report.problems.append("the drafter uses MLA attention (Eagle3DeepseekV2ForCausalLM) but the target is not an "
                               "MLA model (no kv_lora_rank): vLLM runs the drafter's attention on the target's MLA "
                               "kernels")
        return
    try:
        width = int(drafter["kv_lora_rank"]) + int(drafter["qk_rope_head_dim"])
    except (KeyError, TypeError):
        report.problems.append("the MLA drafter's config lacks kv_lora_rank or qk_rope_head_dim")
        return
    if width not in MLA_LATENT_WIDTHS:
        report.warnings.append(f"the drafter's kv_lora_rank + qk_rope_head_dim is {width}; vLLM's MLA kernels take "
                               f"{', '.join(map(str, MLA_LATENT_WIDTHS))}")


def check_drafter_fits(target: str, drafter: str) -> FitReport:
    """Read both configs and refuse (DrafterMismatch) a drafter that does not fit; return the report (warnings)."""
    report = drafter_fit(read_config(target), read_config(drafter))
    report.raise_if_unfit(drafter, target)
    return report
