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
num_attention_heads; mixture-of-experts configs (a key naming experts at any depth, e.g.
``num_local_experts``, ``num_experts``, ``n_routed_experts``, DBRX's ``ffn_config.moe_num_experts``,
holding more than one, in any spelling: ``8``, ``8.0``, ``"8"``): the cost model is for dense
models; a field of the wrong type (named); a count outside 1..2^31 - 1. The file is read by
:func:`piper.io.jsonfile.read_json` (size, UTF-8, depth, duplicate keys).
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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import ModelConfigError
from piper.core.limits import MAX_COUNT
from piper.frontend.config import TransformerConfig
from piper.io.jsonfile import read_json

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
        raise ModelConfigError(f"{where}: {key} must be a whole number, got {_short(value)}")
    if not 1 <= value <= MAX_COUNT:
        raise ModelConfigError(f"{where}: {key} must be >= 1 and <= {MAX_COUNT}, got {_short(value)}")
    return int(value)


def _str(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise ModelConfigError(f"{where}: {key} must be a string, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: a key whose name holds one of these words counts experts (any depth: DBRX's
#: ``ffn_config.moe_num_experts``, Llama 4's ``text_config.num_local_experts``)
_MOE_WORDS = ("expert",)


def _moe_key(raw: Any, path: str = "") -> tuple[str, Any] | None:
    """The first key (dotted path) that makes ``raw`` a mixture-of-experts config, with its
    value: a key naming experts (``num_local_experts``, ``num_experts``, ``n_routed_experts``,
    ``moe_num_experts``, ``num_experts_per_tok``, ...) holding a number > 1 (also written as a
    float or a string), a list, or anything that is not a number; 0, 1, false and null are dense."""
    items = raw.items() if isinstance(raw, Mapping) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        where = f"{path}.{key}" if path and isinstance(key, str) else f"{path}[{key}]" if path else str(key)
        if isinstance(key, str) and any(w in key.lower() for w in _MOE_WORDS) and not isinstance(value, Mapping):
            if value is None or isinstance(value, bool):
                pass
            elif isinstance(value, (int, float)):
                if value > 1:
                    return where, value
            elif isinstance(value, str):
                try:
                    if float(value) > 1:
                        return where, value
                except ValueError:
                    return where, value
            else:
                return where, value
        if isinstance(value, (Mapping, list)):
            found = _moe_key(value, where)
            if found is not None:
                return found
    return None


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
    act = _str(_get(raw, ("hidden_act", "activation_function"), name, "gelu"), "hidden_act", name).lower()
    model_type = _str("" if raw.get("model_type") is None else raw["model_type"], "model_type", name).lower()
    llama = model_type in _LLAMA_TYPES or (model_type not in _GPT_TYPES and act in _GATED)
    moe = _moe_key(raw)
    if moe is not None:
        raise ModelConfigError(f"{name}: {moe[0]} = {_short(moe[1])}: a mixture-of-experts model; the cost model "
                               "is for dense models only (MoE is not supported yet)")
    head_dim = raw.get("head_dim")
    if head_dim is not None and _int(head_dim, "head_dim", name) * heads != hidden:
        raise ModelConfigError(
            f"{name}: head_dim ({head_dim!r}) differs from hidden_size / num_attention_heads ({hidden} / {heads}): not supported"
        )
    tied = raw.get("tie_word_embeddings", not llama)
    if not isinstance(tied, bool):
        raise ModelConfigError(f"{name}: tie_word_embeddings must be true or false, got {_short(tied)}")
    for key in ("attention_bias", "mlp_bias"):
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise ModelConfigError(f"{name}: {key} must be true or false, got {_short(raw[key])}")
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
    raw = read_json(p, ModelConfigError, "model config")
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return config_from_hf(raw, name=name or "hf-config", seq_length=seq_length)
