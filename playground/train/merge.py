"""Weight-space ensembling of a drafter pair with the pair a later training stage made from it (WiSE-FT).

    python -m playground train merge --base assets/models/smollm2-135m --tuned runs/long-drafters --alpha 0.5 \
        --out runs/merged

Every floating-point tensor of each variant becomes (1 - alpha) * base + alpha * tuned, computed in float32 and
stored in the checkpoint's own dtype; the draft vocabulary (`d2t`, `t2d`) must be the same in both. A fine-tuning
stage on new data (long contexts) can cost the skills of the stage before it (short chats); averaging the two
along the path between them often keeps most of both (Wortsman et al., "Robust fine-tuning of zero-shot models",
2022). The tuned pair must have been trained from the base pair (`--init-from`), so the average stays on one
fine-tuning path and both variants stay identical except `fc_norm` / `norm_output`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from playground.train.drafter import VARIANTS
from playground.train.evaluate_long import drafter_digests


def interpolate(base: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    if base.keys() != tuned.keys():
        raise ValueError(f"different tensors: {sorted(base.keys() ^ tuned.keys())}")
    merged = {}
    for name, a in base.items():
        b = tuned[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(f"{name}: {tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}")
        if a.is_floating_point():
            merged[name] = ((1 - alpha) * a.float() + alpha * b.float()).to(a.dtype)
        elif torch.equal(a, b):
            merged[name] = a
        else:
            raise ValueError(f"{name} differs (a different draft vocabulary?)")
    return merged


def merge(base_root: Path, tuned_root: Path, alpha: float, out_root: Path) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    for variant in VARIANTS:
        base, tuned, out = base_root / variant, tuned_root / variant, out_root / variant
        tuned_log = json.loads((tuned / "training_log.json").read_text())
        if tuned_log.get("continued_from") != json.loads((base / "training_log.json").read_text()):
            raise ValueError(f"{tuned} was not trained from {base} (its training log does not continue that one's)")
        if json.loads((tuned / "config.json").read_text()) != json.loads((base / "config.json").read_text()):
            raise ValueError(f"{tuned}/config.json and {base}/config.json differ")
        digests = drafter_digests({"base_sha256": str(base), "tuned_sha256": str(tuned)})
        log = {"merge": {"alpha": alpha, "method": "(1 - alpha) * base + alpha * tuned, per tensor, in float32",
                         **digests}, "variant": variant, "continued_from": tuned_log}
        weights = interpolate(load_file(base / "model.safetensors"), load_file(tuned / "model.safetensors"), alpha)
        out.mkdir(parents=True, exist_ok=True)
        save_file(weights, out / "model.safetensors", metadata={"format": "pt"})  # OUT may be BASE: written last
        if not (out / "config.json").exists() or not (out / "config.json").samefile(base / "config.json"):
            shutil.copy(base / "config.json", out / "config.json")
        (out / "training_log.json").write_text(json.dumps(log, indent=2))
        print(f"{out}: {alpha} of {tuned} + {1 - alpha} of {base}")
