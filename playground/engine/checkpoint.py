"""Reading and writing drafter checkpoints in the three public layouts.

| layout      | config.json                                   | weight keys                     |
|-------------|-----------------------------------------------|---------------------------------|
| official    | architectures ["LlamaForCausalLMEagle3"]      | fc, midlayer.*, norm, lm_head   |
| vllm        | same config                                   | fc, layers.0.*, norm, lm_head   |
| speculators | speculators_model_type "eagle3" + transformer_layer_config | fc, layers.0.*, ... |
| MLA         | architectures ["Eagle3DeepseekV2ForCausalLM"] + DeepSeek's MLA fields (kv_lora_rank, ...) | as official
  or vllm, with `self_attn.{q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}` |

All: `embed_tokens.weight` optional (the target's is shared), `d2t` offsets optional (absent = full vocabulary),
`t2d` ignored, `fc_norm.{i}.weight` present exactly when `fc_norm` is true.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .drafter import MLA_FIELDS, DrafterConfig, Eagle3Drafter


class CheckpointError(ValueError):
    """A drafter checkpoint that cannot be used; the message names the problem."""


MLA_ARCHITECTURES = {"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"}  # vLLM's deepseek_eagle3
EAGLE3_ARCHITECTURES = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator", *MLA_ARCHITECTURES}
# What an MLA drafter's config.json says it is: Kimi K2's name for the DeepSeek-V3 architecture, as the published Kimi
# drafters' configs (TorchSpec's kimi_k25_eagle3_mla.json) write it. vLLM reads it as a DeepseekV3Config; it would
# rewrite "deepseek_v3" into its multi-token-prediction model instead of loading an EAGLE-3 drafter.
MLA_MODEL_TYPE = "kimi_k2"
_IGNORED_KEYS = {"t2d"}


def aux_layer_ids(raw: dict) -> list[int] | None:
    """The aux layer ids a drafter config.json names (top level or inside `eagle_config`), as listed."""
    ids = raw.get("eagle_aux_hidden_state_layer_ids") or (raw.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    return [int(i) for i in ids] if ids else None


def _rope_theta(layer: dict) -> float:
    params = layer.get("rope_parameters") or {}
    return float(layer.get("rope_theta") or params.get("rope_theta") or 10000.0)


def _rope_scaling(layer: dict) -> dict | None:
    scaling = layer.get("rope_scaling")
    if scaling is None:
        params = layer.get("rope_parameters") or {}
        if params.get("rope_type", "default") != "default":
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return scaling


def _mla_fields(layer: dict, archs: set[str]) -> dict:
    """DrafterConfig's MLA fields of an `Eagle3DeepseekV2ForCausalLM` config ({} for a Llama drafter)."""
    if not archs & MLA_ARCHITECTURES:
        if layer.get("kv_lora_rank"):
            raise CheckpointError(f"drafter config has MLA fields (kv_lora_rank) but architectures {sorted(archs)}; an "
                                  f"MLA drafter is one of {sorted(MLA_ARCHITECTURES)}")
        return {}
    for key in MLA_FIELDS:
        if key != "q_lora_rank" and not layer.get(key):  # no q_lora_rank: a full-rank query projection
            raise CheckpointError(f"MLA drafter config lacks {key!r} (DeepSeek-V3's attention fields)")
    if layer.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"MLA drafter's hidden_act is {layer['hidden_act']!r}; only silu is supported")
    return {key: int(layer[key]) if layer.get(key) else None for key in MLA_FIELDS}


def config_from_dict(raw: dict) -> DrafterConfig:
    """Parse a drafter config.json (any of the three layouts) into a DrafterConfig."""
    speculators = raw.get("speculators_model_type") is not None
    archs = set(raw.get("architectures") or [])
    if speculators:
        if raw["speculators_model_type"] != "eagle3":
            raise CheckpointError(f"unsupported speculators_model_type {raw['speculators_model_type']!r} "
                                  "(want 'eagle3')")
        layer = raw.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise CheckpointError("speculators config has no transformer_layer_config")
    else:
        if not archs & EAGLE3_ARCHITECTURES:
            raise CheckpointError(
                f"unknown drafter layout: architectures {sorted(archs) or 'missing'}; expected one of "
                f"{sorted(EAGLE3_ARCHITECTURES)} or a speculators config"
            )
        layer = raw
    try:
        hidden = int(layer["hidden_size"])
        aux_ids = aux_layer_ids(raw)
        eagle_config = raw.get("eagle_config") or {}
        if eagle_config.get("use_aux_hidden_state") is False:
            raise CheckpointError("drafters without aux hidden states (use_aux_hidden_state: false) are not supported")
        num_aux = int(raw.get("num_aux_hidden_states") or (len(aux_ids) if aux_ids else 3))
        if aux_ids and len(aux_ids) != num_aux:
            raise CheckpointError(
                f"num_aux_hidden_states is {num_aux} but eagle_aux_hidden_state_layer_ids has {len(aux_ids)} entries"
            )
        vocab = int(layer["vocab_size"])
        mla = _mla_fields(layer, set() if speculators else archs)
        return DrafterConfig(
            hidden_size=hidden,
            intermediate_size=int(layer["intermediate_size"]),
            num_attention_heads=int(layer["num_attention_heads"]),
            num_key_value_heads=int(layer["num_attention_heads"] if mla else
                                    layer.get("num_key_value_heads") or layer["num_attention_heads"]),
            head_dim=None if mla else layer.get("head_dim"),
            num_hidden_layers=int(layer.get("num_hidden_layers", 1)),
            vocab_size=vocab,
            draft_vocab_size=int(raw.get("draft_vocab_size") or layer.get("draft_vocab_size") or vocab),
            target_hidden_size=int(raw.get("target_hidden_size") or layer.get("target_hidden_size") or hidden),
            num_aux_hidden_states=num_aux,
            aux_layer_ids=aux_ids,
            rms_norm_eps=float(layer.get("rms_norm_eps", 1e-5)),
            rope_theta=_rope_theta(layer),
            rope_scaling=_rope_scaling(layer),
            max_position_embeddings=int(layer.get("max_position_embeddings", 2048)),
            fc_norm=bool(raw.get("fc_norm", False)),
            norm_output=bool(raw.get("norm_output", False)),
            # as vLLM reads it: inside eagle_config first (some public drafters put it there), then the top level
            norm_before_fc=bool(eagle_config.get("norm_before_fc", raw.get("norm_before_fc", False))),
            # vLLM reads a speculators config without the key as True; the other layouts default to False.
            norm_before_residual=bool(raw.get("norm_before_residual", speculators)),
            fc_bias=bool(raw.get("bias", False)),
            attention_bias=bool(layer.get("attention_bias", False)),
            **mla,
            extra=raw,
        )
    except KeyError as missing:
        raise CheckpointError(f"drafter config.json lacks required key {missing.args[0]!r}") from None
    except ValueError as bad:
        if isinstance(bad, CheckpointError):
            raise
        raise CheckpointError(f"drafter config.json is invalid: {bad}") from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """safetensors first (single file or sharded); `.bin` only through torch.load(weights_only=True)."""
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        weights: dict[str, torch.Tensor] = {}
        for shard in shards:
            try:
                weights.update(load_file(str(shard)))
            except Exception as err:  # safetensors raises several types for corrupt files
                raise CheckpointError(f"cannot read {shard.name}: {err}") from None
        return weights
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if bins:
        weights = {}
        for path in bins:
            try:
                weights.update(torch.load(path, map_location="cpu", weights_only=True))
            except Exception as err:
                raise CheckpointError(f"cannot read {path.name} (loaded with weights_only=True): {err}") from None
        return weights
    raise CheckpointError(f"no model.safetensors or pytorch_model.bin in {folder}")


def _normalise_key(key: str) -> str:
    """Map every layout onto the module's own names (`layers.{i}.*`)."""
    if key.startswith("model."):
        key = key[len("model.") :]
    if key.startswith("midlayer."):
        key = "layers.0." + key[len("midlayer.") :]
    return key


def _normalise_keys(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {_normalise_key(k): v for k, v in weights.items() if _normalise_key(k) not in _IGNORED_KEYS}


def _as_written(key: str, layout: str, raw_keys) -> str:
    """A module key spelled as this checkpoint spells it (`midlayer.*` in the official layout), for messages."""
    written = [k for k in raw_keys if _normalise_key(k) == key]
    if written:
        return written[0]
    return "midlayer." + key[len("layers.0.") :] if layout == "official" and key.startswith("layers.0.") else key


def detect_layout(raw_config: dict, weights: dict[str, torch.Tensor]) -> str:
    if raw_config.get("speculators_model_type"):
        return "speculators"
    return "official" if any(k.startswith("midlayer.") for k in weights) else "vllm"


def resolve_folder(path_or_id: str) -> Path:
    """A local folder, or a Hub id fetched with huggingface_hub (only where the network allows)."""
    folder = Path(path_or_id).expanduser()
    if folder.is_dir():
        return folder
    if folder.exists() or path_or_id.startswith((".", "/", "~")) or path_or_id.count("/") != 1:
        raise CheckpointError(f"not a checkpoint folder: {path_or_id}")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path_or_id, allow_patterns=["*.json", "*.safetensors", "*.bin"]))
    except Exception as err:
        raise CheckpointError(f"cannot fetch {path_or_id!r} from the Hugging Face Hub: "
                              f"{type(err).__name__}: {err}") from None


def load_drafter(path_or_id: str | os.PathLike, dtype: torch.dtype = torch.float32) -> tuple[Eagle3Drafter, str]:
    """Load a drafter in any of the three layouts. Returns (drafter, layout).

    The drafter has no embeddings if the checkpoint ships none: call `use_target_embeddings` (the
    target wrapper's `attach` does this and checks the fit)."""
    folder = resolve_folder(str(path_or_id))
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"no config.json in {folder}")
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"config.json in {folder} is not valid JSON: {err}") from None
    cfg = config_from_dict(raw)
    raw_weights = read_weights(folder)
    layout = detect_layout(raw, raw_weights)
    weights = _normalise_keys(raw_weights)
    has_embed = "embed_tokens.weight" in weights
    drafter = Eagle3Drafter(cfg, with_embeddings=has_embed)
    expected = {k: v for k, v in drafter.state_dict().items() if not k.startswith("rotary.")}
    if "d2t" not in weights:
        if cfg.draft_vocab_size != cfg.vocab_size:
            raise CheckpointError(
                f"checkpoint lacks 'd2t' but draft_vocab_size {cfg.draft_vocab_size} != vocab_size {cfg.vocab_size}"
            )
        weights["d2t"] = expected["d2t"]  # identity mapping
    def spelled(keys):
        return ", ".join(_as_written(k, layout, raw_weights) for k in keys[:6])

    missing = sorted(set(expected) - set(weights))
    if missing:
        raise CheckpointError(f"drafter checkpoint ({layout} layout) is missing key(s): {spelled(missing)}")
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        norm = any(k.startswith("fc_norm.") for k in unexpected)
        hint = " (fc_norm weights but config has fc_norm: false)" if norm else ""
        raise CheckpointError(f"drafter checkpoint has unexpected key(s){hint}: {spelled(unexpected)}")
    for key, tensor in expected.items():
        if tuple(weights[key].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"shape mismatch for {spelled([key])}: checkpoint {tuple(weights[key].shape)}, "
                f"config implies {tuple(tensor.shape)}"
            )
    weights["d2t"] = weights["d2t"].long()
    drafter.load_state_dict(weights, strict=False)
    d2t_targets = torch.arange(cfg.draft_vocab_size) + drafter.d2t
    if int(d2t_targets.min()) < 0 or int(d2t_targets.max()) >= cfg.vocab_size:
        raise CheckpointError("d2t maps draft ids outside the target vocabulary (expected offsets, not absolute ids)")
    drafter = drafter.to(dtype).eval()
    # RoPE frequencies stay float32 (as in HF targets): a bf16 inv_freq shifts the angles at long positions.
    drafter.rotary = type(drafter.rotary)(cfg.rope_config())
    return drafter, layout


def save_drafter(drafter: Eagle3Drafter, folder: str | os.PathLike, dtype: torch.dtype = torch.float16,
                 t2d: torch.Tensor | None = None, include_embeddings: bool = False) -> None:
    """Write the official layout (`LlamaForCausalLMEagle3`, `midlayer.*`), as SafeAILab/TorchSpec do; an MLA
    drafter as vLLM's `deepseek_eagle3` reads it (`Eagle3DeepseekV2ForCausalLM`, the same `midlayer.*` keys)."""
    cfg = drafter.config
    if cfg.num_hidden_layers != 1:
        raise ValueError("the official layout holds exactly one layer (midlayer)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for key, value in drafter.state_dict().items():
        if key.startswith("rotary.") or (key.startswith("embed_tokens.") and not include_embeddings):
            continue
        if key.startswith("layers.0."):
            key = "midlayer." + key[len("layers.0.") :]
        tensors[key] = (value.detach().to("cpu", dtype) if value.is_floating_point() else value.cpu()).contiguous()
    if t2d is not None:
        tensors["t2d"] = t2d.bool().cpu().contiguous()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM" if cfg.mla else "LlamaForCausalLMEagle3"],
        "model_type": MLA_MODEL_TYPE if cfg.mla else "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "num_hidden_layers": 1,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "num_aux_hidden_states": cfg.num_aux_hidden_states,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "fc_norm": cfg.fc_norm,
        "norm_output": cfg.norm_output,
    }
    if cfg.mla:
        config.update({"num_key_value_heads": cfg.num_attention_heads, "hidden_act": "silu", "rope_interleave": True,
                       **{key: getattr(cfg, key) for key in MLA_FIELDS}})
        del config["head_dim"]
    if cfg.rope_scaling:
        config["rope_scaling"] = cfg.rope_scaling
    if cfg.aux_layer_ids:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": cfg.aux_layer_ids, "use_aux_hidden_state": True}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
