"""Read a Hugging Face ``config.json`` (the JSON file only, no weights, no network).

Keys read (Llama / Mistral style): ``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads`` (default: the heads),
``intermediate_size`` (default 4h), ``vocab_size``,
``max_position_embeddings`` (the sequence length unless one is given: for
long-context checkpoints such as Llama 3.1's 131,072 pass the training length),
``hidden_act``, ``tie_word_embeddings`` (default: false for the Llama family as
in transformers' ``LlamaConfig``, true otherwise as in ``PretrainedConfig``),
``attention_bias`` / ``mlp_bias`` (either one puts biases on every linear layer).
``head_dim`` (Qwen3, GPT-OSS: a head width other than hidden_size / num_attention_heads).
Mixture of experts (:mod:`piper.frontend.moe`), read from the top level only:

* experts: ``num_local_experts`` (Mixtral, GPT-OSS), ``num_experts`` (Qwen-MoE),
  ``n_routed_experts`` (DeepSeek), ``moe_num_experts``; per token: ``num_experts_per_tok``,
  ``moe_top_k`` or ``experts_per_token`` (GPT-OSS);
* the expert width ``moe_intermediate_size`` (Qwen-MoE, DeepSeek; then ``intermediate_size`` is the
  dense layers' width), else ``intermediate_size`` (Mixtral, GPT-OSS: every layer is MoE);
* shared experts: ``shared_expert_intermediate_size`` (Qwen2-MoE: one) or ``n_shared_experts``
  (DeepSeek: that many of the expert width);
* which layers: ``first_k_dense_replace`` and ``moe_layer_freq`` (DeepSeek: layer i is MoE when
  i >= first_k_dense_replace and i % freq == 0), ``decoder_sparse_step`` (Qwen-MoE: (i + 1) % step
  == 0), ``mlp_only_layers`` (must be empty);
* the router: ``scoring_func`` ("softmax" or "sigmoid"); ``model_type`` "gpt_oss" puts biases on
  the router and the experts (transformers' ``GptOssTopKRouter`` / ``GptOssExperts``).

A config naming experts in any other key (a top-level key holding "expert" that is not read
above, or one at any depth: DBRX's ``ffn_config.moe_num_experts``, Llama 4's
``text_config.num_local_experts``) with a value other than 0, 1, false or null is refused with
the key named; every key read has its type checked (``8.0`` or ``"8"`` for a count is an error).
Multi-head latent attention (DeepSeek-V2/V3) when ``kv_lora_rank`` is given: ``q_lora_rank``
(null: none), ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``. DeepSeek-V3's
multi-token-prediction module (``num_nextn_predict_layers``) is not modelled (the 671B count
excludes it). Refused with a clear error: a field of the wrong type (named); a count outside
1..2^31 - 1. The file is read by :func:`piper.io.jsonfile.read_json` (size, UTF-8, depth,
duplicate keys).
Sliding-window attention (GPT-OSS, Gemma 3 style): ``layer_types``, one entry a layer,
"sliding_attention" (the layer attends to the ``sliding_window`` latest tokens, a whole number
>= 1) or "full_attention"; another entry, a list of the wrong length, or a sliding layer without
``sliding_window`` is refused with the key named. Without ``layer_types``, Qwen2's rule when
``use_sliding_window`` is true (transformers' ``Qwen2Attention``): layer i attends within
``sliding_window`` when i >= ``max_window_layers`` (which must then be given); otherwise
``sliding_window`` is not read (Qwen2/3 write it with ``use_sliding_window`` false; Mistral 7B v0.1's
4,096 is its training length: full causal attention).
GPT-2 style: ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (default 4h),
``n_positions`` (or ``n_ctx``), ``activation_function``.

What else is refused, with the key named: two spellings of one quantity that disagree
(``num_local_experts`` 8 beside ``num_experts`` 16, ``n_layer`` beside ``num_hidden_layers``; see
:data:`ALIASES`), ``decoder_sparse_step`` beside ``moe_layer_freq`` and ``n_shared_experts`` beside
``shared_expert_intermediate_size`` (each pair says the same thing two ways); a dropout key that is not
a probability in [0, 1); an activation outside :data:`ACTIVATIONS`; a language model nested in ``text_config``
(or ``language_config``, ``llm_config``: pass that object as its own file). Every other key is either
read, or one of :data:`IGNORED_KEYS` (token ids, initialisation, norm epsilons, rotary frequencies,
auxiliary-loss and routing coefficients, the checkpoint's storage dtype and quantization: none
changes a layer's time or memory in this model), or named in a warning (``warn``), as is a
``model_type`` this reader does not know (its family is then guessed from the activation).

Family rules (documented choices, not read from the file):

* a gated activation (``silu``, ``swish``, ``swiglu``) means a SwiGLU MLP
  with RMSNorm, no biases and rotary positions (Llama's architecture);
* otherwise (``gelu*``, ``relu``) a two-matrix MLP with LayerNorm, biases
  and learned positions (GPT-2's). ``model_type`` "llama"/"mistral"/"qwen2"
  forces the Llama family, "gpt2"/"gpt_bigcode" the GPT family.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import ModelConfigError
from piper.core.limits import MAX_COUNT
from piper.core.problem import short_repr
from piper.frontend.config import TransformerConfig
from piper.frontend.moe import ROUTER_SCORES, MLAConfig, MoEConfig
from piper.io.jsonfile import read_json

__all__ = ["ACTIVATIONS", "ALIASES", "IGNORED_KEYS", "config_from_hf", "load_hf_config", "unread_keys"]

_GATED = ("silu", "swish", "swiglu")
#: the activations read: the gated ones (the Llama family) and GPT-2's
ACTIVATIONS = _GATED + ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "relu")
_LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                "deepseek_v3", "gpt_oss")
_GPT_TYPES = ("gpt2", "gpt_bigcode")


def _get(raw: Mapping[str, Any], keys: tuple[str, ...], where: str, default: Any = None) -> Any:
    for key in keys:
        if key in raw and raw[key] is not None:
            return raw[key]
    if default is not None:
        return default
    raise ModelConfigError(f"{where}: missing key {' / '.join(repr(k) for k in keys)}")


def _int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):  # 4096.0 too: a count is written as an integer
        raise ModelConfigError(f"{where}: {key} must be a whole number (an integer), got {short_repr(value)}")
    if not 1 <= value <= MAX_COUNT:
        raise ModelConfigError(f"{where}: {key} must be >= 1 and <= {MAX_COUNT}, got {short_repr(value)}")
    return int(value)


def _str(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise ModelConfigError(f"{where}: {key} must be a string, got {short_repr(value)}")
    return value


#: a key whose name holds one of these words counts experts (any depth: DBRX's
#: ``ffn_config.moe_num_experts``, Llama 4's ``text_config.num_local_experts``)
_MOE_WORDS = ("expert",)


#: the top-level keys :func:`_moe_config` reads (any other key naming experts is refused)
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
            "moe_top_k", "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
            "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
            "scoring_func")
_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_top_k", "experts_per_token")


#: spellings of one quantity: when more than one is given they must agree
ALIASES = (("num_hidden_layers", "n_layer"), ("hidden_size", "n_embd"), ("num_attention_heads", "n_head"),
           ("intermediate_size", "n_inner"), ("max_position_embeddings", "n_positions", "n_ctx"),
           ("hidden_act", "activation_function"), _EXPERT_COUNT_KEYS, _TOP_K_KEYS)
#: pairs that say one thing two ways (refused together)
_EXCLUSIVE = (("decoder_sparse_step", "moe_layer_freq"), ("n_shared_experts", "shared_expert_intermediate_size"))
_DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout")
#: where wrapper configs nest their language model
_NESTED = ("text_config", "language_config", "llm_config")
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
#: every top-level key the reader reads
READ_KEYS = frozenset(
    [k for group in ALIASES for k in group] + list(MOE_KEYS) + list(_MLA_KEYS) + list(_DROPOUT_KEYS)
    + ["num_key_value_heads", "vocab_size", "model_type", "head_dim", "layer_types", "sliding_window",
       "use_sliding_window", "max_window_layers", "tie_word_embeddings", "attention_bias", "mlp_bias"])
#: keys that change neither a layer's time nor its memory in this model (read by nothing, warned of by
#: nothing): metadata, token ids, initialisation, norm epsilons, rotary frequencies and scaling, the
#: auxiliary losses' and the router's coefficients (DeepSeek's group-limited routing included: the
#: dispatch is priced as all-to-all over the expert group either way), inference-only switches, the
#: checkpoint's storage dtype and quantization (the training precision is ``--precision``), DeepSeek-V3's
#: multi-token-prediction module (``num_nextn_predict_layers``: not modelled, the 671B count excludes it)
IGNORED_KEYS = frozenset((
    "architectures", "auto_map", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class",
    "initializer_range", "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "output_router_logits", "router_aux_loss_coef", "router_z_loss_coef", "router_jitter_noise", "aux_loss_alpha",
    "seq_aux", "norm_topk_prob", "routed_scaling_factor", "topk_method", "n_group", "topk_group", "ep_size",
    "num_nextn_predict_layers", "pretraining_tp", "quantization_config", "swiglu_limit", "initial_context_length",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "id2label", "label2id",
    "problem_type", "finetuning_task", "task_specific_params", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "attn_implementation", "_attn_implementation",
))


def unread_keys(raw: Mapping[str, Any]) -> list[str]:
    """The top-level keys of ``raw`` that the reader neither reads nor lists in :data:`IGNORED_KEYS`."""
    return sorted(str(k) for k in raw if k not in READ_KEYS and k not in IGNORED_KEYS)


def _moe_key(raw: Any, path: str = "", skip: tuple[str, ...] = ()) -> tuple[str, Any] | None:
    """The first key (dotted path) naming experts that the reader does not understand, with its value:
    a key holding "expert" (not in ``skip`` at the top level) whose value is a number > 1 (also
    written as a float or a string), a list, or anything that is not a number; 0, 1, false and
    null say "dense"."""
    items = raw.items() if isinstance(raw, Mapping) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        where = f"{path}.{key}" if path and isinstance(key, str) else f"{path}[{key}]" if path else str(key)
        if (isinstance(key, str) and any(w in key.lower() for w in _MOE_WORDS) and not isinstance(value, Mapping)
                and not (not path and key in skip)):
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


def _count0(raw: Mapping[str, Any], key: str, where: str, default: int = 0) -> int:
    """An optional count that may be 0 (a key absent or null gives ``default``)."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, (float, str)):
        raise ModelConfigError(f"{where}: {key} must be a whole number (an integer), got {short_repr(value)}")
    if value == 0 and not isinstance(value, bool) and isinstance(value, int):
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ModelConfigError(f"{where}: {key} must be >= 0 and <= {MAX_COUNT}, got {short_repr(value)}")
    return _int(value, key, where)


def _moe_config(raw: Mapping[str, Any], name: str, model_type: str, dense_ffn: int | None) -> MoEConfig | None:
    """The mixture-of-experts part of a config (None for a dense one): see the module docstring."""
    experts = 0
    for key in _EXPERT_COUNT_KEYS:
        if raw.get(key) is not None:
            experts = _count0(raw, key, name)
            break
    if experts <= 1:
        stray = _moe_key({k: raw[k] for k in MOE_KEYS if k in raw and k not in _EXPERT_COUNT_KEYS})
        if stray is not None:
            raise ModelConfigError(f"{name}: {stray[0]} = {short_repr(stray[1])}: a mixture-of-experts key without an "
                                   f"expert count ({' / '.join(_EXPERT_COUNT_KEYS)})")
        return None
    top_key = next((k for k in _TOP_K_KEYS if raw.get(k) is not None), None)
    if top_key is None:
        raise ModelConfigError(f"{name}: a mixture-of-experts config ({experts} experts) needs "
                               f"{' / '.join(repr(k) for k in _TOP_K_KEYS)}")
    top_k = _count0(raw, top_key, name)
    if raw.get("moe_intermediate_size") is not None:
        width = _count0(raw, "moe_intermediate_size", name)
    elif dense_ffn is not None:
        width = dense_ffn
    else:
        raise ModelConfigError(f"{name}: a mixture-of-experts config needs 'moe_intermediate_size' or 'intermediate_size'")
    shared_n = _count0(raw, "n_shared_experts", name)
    shared_width = shared_n * width
    if raw.get("shared_expert_intermediate_size") is not None:
        shared_width = _count0(raw, "shared_expert_intermediate_size", name)
        shared_n = 1 if shared_width else 0
    first_dense = _count0(raw, "first_k_dense_replace", name)
    freq, offset = 1, 0
    if raw.get("moe_layer_freq") is not None:
        freq = _count0(raw, "moe_layer_freq", name, 1)
    if raw.get("decoder_sparse_step") is not None:
        freq, offset = _count0(raw, "decoder_sparse_step", name, 1), 1
    only = raw.get("mlp_only_layers")
    if only is not None and (not isinstance(only, list) or only):
        raise ModelConfigError(f"{name}: mlp_only_layers = {short_repr(only)}: only an empty list is supported")
    score = "softmax" if raw.get("scoring_func") is None else _str(raw["scoring_func"], "scoring_func", name).lower()
    if score not in ROUTER_SCORES:
        raise ModelConfigError(f"{name}: scoring_func must be one of {', '.join(ROUTER_SCORES)}, got {short_repr(score)}")
    gpt_oss = model_type == "gpt_oss"
    try:
        return MoEConfig(experts=experts, top_k=top_k, expert_ffn_hidden_size=width, shared_ffn_hidden_size=shared_width,
                         shared_experts=shared_n, first_dense_layers=first_dense, layer_freq=freq, layer_offset=offset,
                         router_score=score, router_bias=gpt_oss, expert_bias=gpt_oss)
    except ModelConfigError as exc:
        raise ModelConfigError(f"{name}: {exc}") from None


def _mla_config(raw: Mapping[str, Any], name: str) -> MLAConfig | None:
    """Multi-head latent attention's widths when ``kv_lora_rank`` is given (None otherwise)."""
    if raw.get("kv_lora_rank") is None:
        return None
    q_lora = 0 if raw.get("q_lora_rank") is None else _int(raw["q_lora_rank"], "q_lora_rank", name)
    values = {key: _int(_get(raw, (key,), name), key, name)
              for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    return MLAConfig(q_lora_rank=q_lora, **values)


#: HF ``layer_types`` entries: a windowed layer, a full-attention layer
LAYER_TYPES = ("sliding_attention", "full_attention")


def _window(raw: Mapping[str, Any], name: str, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """(sliding_window, the windowed layers) from ``layer_types`` (module docstring)."""
    types = raw.get("layer_types")
    if types is None and raw.get("use_sliding_window") and raw.get("sliding_window") is not None:
        # Qwen2 / Qwen3 without layer_types (transformers' Qwen2Attention): layer i attends within the
        # window when i >= max_window_layers
        if raw.get("max_window_layers") is None:
            raise ModelConfigError(f"{name}: use_sliding_window is true but max_window_layers (the first windowed "
                                   "layer) is not given")
        first = _count0(raw, "max_window_layers", name)
        where = tuple(range(first, layers))
        return (_int(raw["sliding_window"], "sliding_window", name), where) if where else (None, ())
    if types is None:
        return None, ()
    if not isinstance(types, list) or len(types) != layers:
        raise ModelConfigError(f"{name}: layer_types must be a list of {layers} entries (num_hidden_layers), "
                               f"got {short_repr(types)}")
    bad = next((i for i, x in enumerate(types) if x not in LAYER_TYPES), None)
    if bad is not None:
        raise ModelConfigError(f"{name}: layer_types[{bad}] {short_repr(types[bad])} is not one of "
                               f"{', '.join(LAYER_TYPES)}")
    where = tuple(i for i, x in enumerate(types) if x == "sliding_attention")
    if not where:
        return None, ()
    if raw.get("sliding_window") is None:
        raise ModelConfigError(f"{name}: layer_types has sliding_attention layers but sliding_window is not given")
    return _int(raw["sliding_window"], "sliding_window", name), where


def _check_spellings(raw: Mapping[str, Any], name: str) -> None:
    """Refuse aliases that disagree, pairs that say one thing twice, a nested language model, dropout
    that is no probability and a ``use_sliding_window`` that is not a boolean (module docstring)."""
    nested = next((k for k in _NESTED if isinstance(raw.get(k), Mapping)), None)
    if nested is not None:
        unknown = _moe_key(raw, skip=MOE_KEYS)  # the expert key, when there is one, is the clearer message
        if unknown is not None:
            raise ModelConfigError(f"{name}: {unknown[0]} = {short_repr(unknown[1])}: a mixture-of-experts key this "
                                   f"reader does not know (it reads {', '.join(MOE_KEYS[:4])}, ... at the top level)")
        raise ModelConfigError(f"{name}: {nested} holds a nested model (a multimodal or wrapper config): this reader "
                               f"reads a decoder-only language model's keys at the top level; give the {nested} "
                               "object as its own config.json")
    for group in ALIASES:
        given = [(k, raw[k]) for k in group if raw.get(k) is not None]
        first = given[0][1] if given else None
        if any(v != first or isinstance(v, bool) != isinstance(first, bool) for _, v in given[1:]):
            raise ModelConfigError(f"{name}: {' and '.join(f'{k} = {short_repr(v)}' for k, v in given)} disagree: "
                                   "they spell the same quantity; give one")
    for a, b in _EXCLUSIVE:
        if raw.get(a) is not None and raw.get(b) is not None:
            raise ModelConfigError(f"{name}: {a} = {short_repr(raw[a])} and {b} = {short_repr(raw[b])}: both say "
                                   "which layers or shared experts there are, in two conventions; give one")
    for key in _DROPOUT_KEYS:
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value < 1):
            raise ModelConfigError(f"{name}: {key} must be a dropout probability in [0, 1), got {short_repr(value)}")
    use = raw.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        raise ModelConfigError(f"{name}: use_sliding_window must be true or false, got {short_repr(use)}")


def config_from_hf(raw: Mapping[str, Any], name: str = "hf-config", seq_length: int | None = None,
                   warn: Callable[[str], None] | None = None) -> TransformerConfig:
    """A :class:`TransformerConfig` from the parsed contents of a Hugging Face ``config.json``.
    ``warn``: called with each warning (keys neither read nor ignored, an unknown ``model_type``);
    default :func:`warnings.warn`."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{name}: a config.json must hold a JSON object")
    _check_spellings(raw, name)
    layers = _int(_get(raw, ("num_hidden_layers", "n_layer"), name), "num_hidden_layers", name)
    hidden = _int(_get(raw, ("hidden_size", "n_embd"), name), "hidden_size", name)
    heads = _int(_get(raw, ("num_attention_heads", "n_head"), name), "num_attention_heads", name)
    kv = _int(_get(raw, ("num_key_value_heads",), name, heads), "num_key_value_heads", name)
    ffn = _int(_get(raw, ("intermediate_size", "n_inner"), name, 4 * hidden), "intermediate_size", name)
    vocab = _int(_get(raw, ("vocab_size",), name), "vocab_size", name)
    if seq_length is None:
        seq_length = _int(_get(raw, ("max_position_embeddings", "n_positions", "n_ctx"), name), "max_position_embeddings", name)
    act = _str(_get(raw, ("hidden_act", "activation_function"), name, "gelu"), "hidden_act", name).lower()
    if act not in ACTIVATIONS:
        raise ModelConfigError(f"{name}: hidden_act {short_repr(act)} is not one this reader knows "
                               f"({', '.join(ACTIVATIONS)})")
    model_type = _str("" if raw.get("model_type") is None else raw["model_type"], "model_type", name).lower()
    llama = model_type in _LLAMA_TYPES or (model_type not in _GPT_TYPES and act in _GATED)
    unknown = _moe_key(raw, skip=MOE_KEYS)
    if unknown is not None:
        raise ModelConfigError(f"{name}: {unknown[0]} = {short_repr(unknown[1])}: a mixture-of-experts key this reader does "
                               f"not know (it reads {', '.join(MOE_KEYS[:4])}, ... at the top level)")
    moe = _moe_config(raw, name, model_type, raw.get("intermediate_size") and ffn)
    mla = _mla_config(raw, name)
    head_dim = raw.get("head_dim")
    if head_dim is not None:
        head_dim = _int(head_dim, "head_dim", name)
        if head_dim * heads == hidden or mla is not None:
            head_dim = None
    window, windowed = _window(raw, name, layers)
    tied = raw.get("tie_word_embeddings", not llama)
    if not isinstance(tied, bool):
        raise ModelConfigError(f"{name}: tie_word_embeddings must be true or false, got {short_repr(tied)}")
    for key in ("attention_bias", "mlp_bias"):
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise ModelConfigError(f"{name}: {key} must be true or false, got {short_repr(raw[key])}")
    bias = bool(raw.get("attention_bias", False) or raw.get("mlp_bias", False)) if llama else True
    # dropout: any positive dropout probability (Llama: attention_dropout 0.0; GPT-2: resid_pdrop 0.1)
    dropout = any(raw.get(k) is not None and raw[k] > 0 for k in _DROPOUT_KEYS)  # checked: _check_spellings
    cfg = TransformerConfig(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=kv,
        ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq_length,
        ffn_kind="swiglu" if llama else "gelu", norm="rmsnorm" if llama else "layernorm",
        linear_bias=bias, learned_positions=not llama, tied_embeddings=tied, dropout=dropout,
        attention_head_dim=head_dim, moe=moe, mla=mla, sliding_window=window, sliding_window_layers=windowed,
    )
    # the warnings once the config is known to be valid (a refused one is one error, not warnings and an error)
    say = warn if warn is not None else (lambda line: warnings.warn(line, stacklevel=3))
    if model_type and model_type not in _LLAMA_TYPES + _GPT_TYPES:
        say(f"{name}: model_type {model_type!r} is not one this reader knows ({', '.join(_LLAMA_TYPES + _GPT_TYPES)}): "
            f"read as the {'Llama' if llama else 'GPT-2'} family from hidden_act {act!r}")
    unread = unread_keys(raw)
    if unread:
        shown = (", ".join(k if k.isprintable() else repr(k) for k in unread[:8])
                 + (f" and {len(unread) - 8} more" if len(unread) > 8 else ""))
        say(f"{name}: keys this reader neither reads nor knows to be without effect, not modelled: {shown}")
    return cfg


def load_hf_config(path: str | Path, seq_length: int | None = None,
                   warn: Callable[[str], None] | None = None) -> TransformerConfig:
    """Read a ``config.json`` file; the model is named after the file's folder (or the file).
    ``warn``: as :func:`config_from_hf`'s."""
    p = Path(path)
    raw = read_json(p, ModelConfigError, "model config")
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return config_from_hf(raw, name=name or "hf-config", seq_length=seq_length, warn=warn)
