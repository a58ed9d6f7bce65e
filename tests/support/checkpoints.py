"""Drafter checkpoints written by hand in each public layout (official, vLLM export, speculators) from the tiny
drafters' weights, with real key names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file, save_file

if TYPE_CHECKING:
    from tests.conftest import TinyModels

DRAFTER_NAMES = ("eagle3", "eagle3.1")

# Real key names (SafeAILab / TorchSpec official layout; vLLM export and speculators use `layers.0.` instead).
LAYER_KEYS = [
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
]
TOP_KEYS = ["fc.weight", "norm.weight", "lm_head.weight", "d2t"]
LAYER_PREFIX = {"official": "midlayer.", "vllm": "layers.0.", "speculators": "layers.0."}
AUX_IDS = [1, 2, 2]  # the tiny target's default [2, N//2, N-3] for N = 4 in layer order, as the tiny drafters trained


def source_weights(tiny: TinyModels, name: str) -> dict[str, torch.Tensor]:
    """The drafter's weights as save_drafter wrote them (official layout), checked key by key."""
    weights = load_file(str(tiny.root / name / "model.safetensors"))
    expected = {"midlayer." + k for k in LAYER_KEYS} | set(TOP_KEYS) | {"t2d"}
    if name == "eagle3.1":
        expected |= {f"fc_norm.{i}.weight" for i in range(3)}
    assert set(weights) == expected
    return weights


def layer_config(tiny: TinyModels) -> dict:
    raw = json.loads((tiny.root / "eagle3" / "config.json").read_text())
    return {k: raw[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                "rms_norm_eps", "max_position_embeddings", "vocab_size")}


def make_config(tiny: TinyModels, layout: str, fc_norm: bool, norm_output: bool, **extra) -> dict:
    layer = layer_config(tiny)
    if layout == "speculators":
        config = {
            "speculators_model_type": "eagle3",
            "architectures": ["Eagle3Speculator"],
            "transformer_layer_config": {
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
                "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, **layer,
            },
            "draft_vocab_size": 300,
            "norm_before_residual": False,
            "target_hidden_size": layer["hidden_size"],
            "eagle_aux_hidden_state_layer_ids": AUX_IDS,
            "fc_norm": fc_norm,
            "norm_output": norm_output,
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": "tiny", "architectures": ["LlamaForCausalLM"]},
            },
        }
    else:
        config = {
            "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "rope_theta": 10000.0, "draft_vocab_size": 300, "tie_word_embeddings": False, "torch_dtype": "float32",
            "target_hidden_size": layer["hidden_size"], **layer,
        }
        if fc_norm:
            config["fc_norm"] = True
        if norm_output:
            config["norm_output"] = True
    config.update(extra)
    return config


def make_weights(source: dict[str, torch.Tensor], layout: str) -> dict[str, torch.Tensor]:
    out = {key: source[key] for key in TOP_KEYS + ["t2d"]}
    out.update({LAYER_PREFIX[layout] + k: source["midlayer." + k] for k in LAYER_KEYS})
    out.update({k: v for k, v in source.items() if k.startswith("fc_norm.")})
    return out


def write(folder: Path, config: dict | str | None, weights: dict[str, torch.Tensor] | None,
          fmt: str = "safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights is not None:
        if fmt == "safetensors":
            save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
        else:
            torch.save(weights, folder / "pytorch_model.bin")
    return folder


def write_layout(tiny: TinyModels, folder: Path, name: str, layout: str, fmt: str = "safetensors", **extra) -> Path:
    fc_norm = norm_output = name == "eagle3.1"
    return write(folder, make_config(tiny, layout, fc_norm, norm_output, **extra),
                 make_weights(source_weights(tiny, name), layout), fmt)
