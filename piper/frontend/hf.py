"""Read a Hugging Face ``config.json`` (the JSON file only, no weights, no network).

Keys read (Llama / Mistral style): ``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads`` (default: the heads),
``intermediate_size`` (default 4h), ``vocab_size``,
``max_position_embeddings`` (the sequence length unless one is given: for
long-context checkpoints such as Llama 3.1's 131,072 pass the training length),
``hidden_act``, ``tie_word_embeddings`` (default: false for the Llama family as
in transformers' ``LlamaConfig``, true otherwise as in ``PretrainedConfig``),
``attention_bias`` / ``mlp_bias`` (either one puts biases on every linear layer).
Refused with a clear error: a ``head_dim`` other than hidden_size /
num_attention_heads, and mixture-of-experts configs (``num_local_experts``,
``num_experts``, ``n_routed_experts``): the cost model is for dense models.
GPT-2 style: ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (default 4h),
``n_positions`` (or ``n_ctx``), ``activation_function``.

Family rules (documented choices, not read from the file):

* a gated activation (``silu``, ``swish``, ``swiglu``) means a SwiGLU MLP
  with RMSNorm, no biases and rotary positions (Llama's architecture);
* otherwise (``gelu*``, ``relu``) a two-matrix MLP with LayerNorm, biases
  and learned positions (GPT-2's). ``model_type`` "llama"/"mistral"/"qwen2"
  forces the Llama family, "gpt2"/"gpt_bigcode" the GPT family.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import ModelConfigError
from piper.frontend.config import TransformerConfig

__all__ = ["config_from_hf", "load_hf_config"]

_GATED = ("silu", "swish", "swiglu")
_LLAMA_TYPES = ("llama", "mistral", "qwen2")
_GPT_TYPES = ("gpt2", "gpt_bigcode")


def _get(raw: Mapping[str, Any], keys: tuple[str, ...], where: str, default: Any = None) -> Any:
    for key in keys:
        if key in raw and raw[key] is not None:
            return raw[key]
    if default is not None:
        return default
    raise ModelConfigError(f"{where}: missing key {' / '.join(repr(k) for k in keys)}")


def _int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        raise ModelConfigError(f"{where}: {key} must be a whole number, got {value!r}")
    return int(value)


def config_from_hf(raw: Mapping[str, Any], name: str = "hf-config", seq_length: int | None = None) -> TransformerConfig:
    """A :class:`TransformerConfig` from the parsed contents of a Hugging Face ``config.json``."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{name}: a config.json must hold a JSON object")
    layers = _int(_get(raw, ("num_hidden_layers", "n_layer"), name), "num_hidden_layers", name)
    hidden = _int(_get(raw, ("hidden_size", "n_embd"), name), "hidden_size", name)
    heads = _int(_get(raw, ("num_attention_heads", "n_head"), name), "num_attention_heads", name)
    kv = _int(_get(raw, ("num_key_value_heads",), name, heads), "num_key_value_heads", name)
    ffn = _int(_get(raw, ("intermediate_size", "n_inner"), name, 4 * hidden), "intermediate_size", name)
    vocab = _int(_get(raw, ("vocab_size",), name), "vocab_size", name)
    if seq_length is None:
        seq_length = _int(_get(raw, ("max_position_embeddings", "n_positions", "n_ctx"), name), "max_position_embeddings", name)
    act = str(_get(raw, ("hidden_act", "activation_function"), name, "gelu")).lower()
    model_type = str(raw.get("model_type", "")).lower()
    llama = model_type in _LLAMA_TYPES or (model_type not in _GPT_TYPES and act in _GATED)
    head_dim = raw.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        raise ModelConfigError(
            f"{name}: head_dim ({head_dim!r}) differs from hidden_size / num_attention_heads ({hidden} / {heads}): not supported"
        )
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if isinstance(raw.get(key), int) and raw[key] > 1:
            raise ModelConfigError(f"{name}: {key} = {raw[key]}: mixture-of-experts models are not supported (dense only)")
    tied = raw.get("tie_word_embeddings", not llama)
    if not isinstance(tied, bool):
        raise ModelConfigError(f"{name}: tie_word_embeddings must be true or false, got {tied!r}")
    bias = bool(raw.get("attention_bias", False) or raw.get("mlp_bias", False)) if llama else True
    # dropout: any positive dropout probability (Llama: attention_dropout 0.0; GPT-2: resid_pdrop 0.1)
    dropout_keys = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout")
    dropout = any(isinstance(raw.get(k), (int, float)) and not isinstance(raw.get(k), bool) and raw[k] > 0
                  for k in dropout_keys)
    return TransformerConfig(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=kv,
        ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq_length,
        ffn_kind="swiglu" if llama else "gelu", norm="rmsnorm" if llama else "layernorm",
        linear_bias=bias, learned_positions=not llama, tied_embeddings=tied, dropout=dropout,
    )


def load_hf_config(path: str | Path, seq_length: int | None = None) -> TransformerConfig:
    """Read a ``config.json`` file; the model is named after the file's folder (or the file)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ModelConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return config_from_hf(raw, name=name or "hf-config", seq_length=seq_length)
