"""Built-in model presets (published architectures).

* ``megatron-*``: the ten GPT models of Table 1 of Narayanan et al.,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (SC'21): heads, hidden size and layers as in the table,
  vocabulary 51,200, sequence length 2,048, GELU MLP with FFN = 4h,
  LayerNorm, biases, learned positions, tied embeddings.
* ``gpt3-175b``: Brown et al., "Language Models are Few-Shot Learners"
  (2020), Table 2.1: 96 layers, d_model 12,288, 96 heads, context 2,048,
  FFN = 4 d_model; GPT-2's BPE vocabulary of 50,257 tokens.
* ``llama2-*``: Touvron et al., "Llama 2: Open Foundation and Fine-Tuned
  Chat Models" (2023), Table 1 (context 4,096; GQA for 70B) with the
  released checkpoints' widths (FFN 11,008 / 13,824 / 28,672, vocabulary 32,000).
* ``llama3-*``: "The Llama 3 Herd of Models" (2024), Table 3 (layers, model
  dimension, FFN dimension, heads, 8 key/value heads, vocabulary 128,000 ->
  128,256 tokens in the released tokenizer); sequence length 8,192 (the
  pre-training length of Table 4).

Mixture-of-experts presets (shapes of the published Hugging Face ``config.json`` files; the
training sequence length is 4,096, the length of the Megatron-Bridge benchmarks and of
DeepSeek-V3's pre-training, Section 4.2; the published total / active parameter counts the
tests compare against are in :data:`MOE_PUBLISHED`):

* ``mixtral-8x7b``: mistralai/Mixtral-8x7B-v0.1 ``config.json`` (Jiang et al., "Mixtral of
  Experts", 2024): 32 layers, h 4,096, 32 heads, 8 KV heads, expert width 14,336, 8 experts,
  top-2, vocabulary 32,000.
* ``mixtral-8x22b``: mistralai/Mixtral-8x22B-v0.1 ``config.json``: 56 layers, h 6,144, 48 heads,
  8 KV heads, expert width 16,384, 8 experts, top-2, vocabulary 32,000.
* ``deepseek-v3``: deepseek-ai/DeepSeek-V3 ``config.json`` (DeepSeek-AI, "DeepSeek-V3 Technical
  Report", 2024, Section 4.2): 61 layers, h 7,168, the first 3 dense (FFN 18,432), 256 routed
  experts of width 2,048 and 1 shared, top-8, sigmoid router, MLA (128 heads, q_lora 1,536,
  kv_lora 512, d_nope 128, d_rope 64, d_v 128), vocabulary 129,280; the multi-token-prediction
  module is not modelled (671B excludes it).
* ``qwen3-30b-a3b`` / ``qwen3-235b-a22b``: Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B
  ``config.json`` (Qwen3 Technical Report, 2025, Table 2): 48 / 94 layers, h 2,048 / 4,096,
  32 / 64 heads of width 128, 4 KV heads, 128 experts of width 768 / 1,536, top-8, vocabulary
  151,936, every layer MoE (decoder_sparse_step 1); the QK-norms (2 x 128 weights a layer) are
  not counted.
* ``gpt-oss-120b``: openai/gpt-oss-120b ``config.json`` (OpenAI, "gpt-oss-120b & gpt-oss-20b
  Model Card", 2025): 36 layers, h 2,880, 64 heads of width 64, 8 KV heads, attention biases,
  128 experts of width 2,880 with biases, top-4, router with bias, vocabulary 201,088; the
  alternating attention of ``layer_types`` ("sliding_attention" on the even layers 0, 2, ..., 34,
  "full_attention" on the odd ones) with ``sliding_window`` 128 tokens. Not modelled: the
  attention sinks (64 weights a layer).

Every preset trains with micro-batch 1 in bf16 (2 bytes); change them with
:meth:`TransformerConfig.with_changes` or the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from piper.core.errors import ModelConfigError
from piper.frontend.config import TransformerConfig
from piper.frontend.hf import load_hf_config
from piper.frontend.moe import MLAConfig, MoEConfig

__all__ = [
    "MEGATRON_TABLE1", "MOE_PUBLISHED", "PRESETS", "load_model", "model_config_path", "preset", "preset_names"]

#: SC'21 Table 1 rows: name -> (attention heads, hidden size, layers, published parameters in billions)
MEGATRON_TABLE1: dict[str, tuple[int, int, int, float]] = {
    "megatron-1.7b": (24, 2304, 24, 1.7),
    "megatron-3.6b": (32, 3072, 30, 3.6),
    "megatron-7.5b": (32, 4096, 36, 7.5),
    "megatron-18b": (48, 6144, 40, 18.4),
    "megatron-39b": (64, 8192, 48, 39.1),
    "megatron-76b": (80, 10240, 60, 76.1),
    "megatron-145b": (96, 12288, 80, 145.6),
    "megatron-310b": (128, 16384, 96, 310.1),
    "megatron-530b": (128, 20480, 105, 529.6),
    "megatron-1t": (160, 25600, 128, 1008.0),
}


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int, seq: int) -> TransformerConfig:
    return TransformerConfig(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=heads,
        ffn_hidden_size=4 * hidden, vocab_size=vocab, seq_length=seq, ffn_kind="gelu",
        norm="layernorm", linear_bias=True, learned_positions=True, tied_embeddings=True,
    )


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int) -> TransformerConfig:
    return TransformerConfig(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=kv,
        ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq, ffn_kind="swiglu",
        norm="rmsnorm", linear_bias=False, learned_positions=False, tied_embeddings=False, dropout=False,
    )


def _build() -> dict[str, TransformerConfig]:
    out: dict[str, TransformerConfig] = {}
    for name, (heads, hidden, layers, _) in MEGATRON_TABLE1.items():
        out[name] = _gpt(name, layers, hidden, heads, vocab=51_200, seq=2_048)
    out["gpt3-175b"] = _gpt("gpt3-175b", 96, 12_288, 96, vocab=50_257, seq=2_048)
    out["llama2-7b"] = _llama("llama2-7b", 32, 4_096, 32, 32, 11_008, 32_000, 4_096)
    out["llama2-13b"] = _llama("llama2-13b", 40, 5_120, 40, 40, 13_824, 32_000, 4_096)
    out["llama2-70b"] = _llama("llama2-70b", 80, 8_192, 64, 8, 28_672, 32_000, 4_096)
    out["llama3-8b"] = _llama("llama3-8b", 32, 4_096, 32, 8, 14_336, 128_256, 8_192)
    out["llama3-70b"] = _llama("llama3-70b", 80, 8_192, 64, 8, 28_672, 128_256, 8_192)
    out["llama3-405b"] = _llama("llama3-405b", 126, 16_384, 128, 8, 53_248, 128_256, 8_192)
    # mixture of experts (module docstring: the HF config.json of each)
    out["mixtral-8x7b"] = _llama("mixtral-8x7b", 32, 4_096, 32, 8, 14_336, 32_000, 4_096).with_changes(
        moe=MoEConfig(experts=8, top_k=2, expert_ffn_hidden_size=14_336))
    out["mixtral-8x22b"] = _llama("mixtral-8x22b", 56, 6_144, 48, 8, 16_384, 32_000, 4_096).with_changes(
        moe=MoEConfig(experts=8, top_k=2, expert_ffn_hidden_size=16_384))
    out["deepseek-v3"] = _llama("deepseek-v3", 61, 7_168, 128, 128, 18_432, 129_280, 4_096).with_changes(
        moe=MoEConfig(experts=256, top_k=8, expert_ffn_hidden_size=2_048, shared_experts=1,
                      shared_ffn_hidden_size=2_048, first_dense_layers=3, router_score="sigmoid"),
        mla=MLAConfig(q_lora_rank=1_536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))
    out["qwen3-30b-a3b"] = _llama("qwen3-30b-a3b", 48, 2_048, 32, 4, 6_144, 151_936, 4_096).with_changes(
        attention_head_dim=128, moe=MoEConfig(experts=128, top_k=8, expert_ffn_hidden_size=768, layer_offset=1))
    out["qwen3-235b-a22b"] = _llama("qwen3-235b-a22b", 94, 4_096, 64, 4, 12_288, 151_936, 4_096).with_changes(
        attention_head_dim=128, moe=MoEConfig(experts=128, top_k=8, expert_ffn_hidden_size=1_536, layer_offset=1))
    out["gpt-oss-120b"] = _llama("gpt-oss-120b", 36, 2_880, 64, 8, 2_880, 201_088, 4_096).with_changes(
        attention_head_dim=64, linear_bias=True, sliding_window=128, sliding_window_layers=tuple(range(0, 36, 2)),
        moe=MoEConfig(experts=128, top_k=4, expert_ffn_hidden_size=2_880, router_bias=True, expert_bias=True))
    return out


#: MoE preset -> (published total parameters, published active parameters, both in billions;
#: whether the active count includes the input embedding table) from the sources of the module
#: docstring: Mixtral paper Section 2.1 (46.7B / 12.9B; Mistral's announcement: 141B / 39B for
#: 8x22B), DeepSeek-V3 report abstract (671B / 37B), Qwen3 report Table 2 (30B / 3B and 235B /
#: 22B; the model cards: 30.5B / 3.3B, 235B / 22B), gpt-oss model card Table 1 (116.83B / 5.13B,
#: the active count without the embedding, with the unembedding)
MOE_PUBLISHED: dict[str, tuple[float, float, bool]] = {
    "mixtral-8x7b": (46.7, 12.9, True),
    "mixtral-8x22b": (141.0, 39.0, True),
    "deepseek-v3": (671.0, 37.0, True),
    "qwen3-30b-a3b": (30.5, 3.3, True),
    "qwen3-235b-a22b": (235.0, 22.0, True),
    "gpt-oss-120b": (116.83, 5.13, False),
}


#: preset name -> configuration
PRESETS: dict[str, TransformerConfig] = _build()


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str) -> TransformerConfig:
    """The preset called ``name`` (case-insensitive); an unknown name lists the known ones."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ModelConfigError(f"unknown model preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[key]


def model_config_path(spec: str) -> Path | None:
    """The Hugging Face config file that the model argument ``spec`` names, or None for a preset
    name. A preset's name is the preset's (write ``./NAME`` for a file or folder of that name); else
    ``spec`` names a config: a path ending in ``.json`` or naming an existing file (or a pipe, such as
    a shell's ``<(...)``), or a model's directory holding a ``config.json`` (as Hugging Face downloads
    it). A directory without one, a path that does not exist or cannot be looked at, is a
    :class:`ModelConfigError` naming it; a bare name that is no path is None (then an unknown preset)."""
    if spec.strip().lower() in PRESETS and not any(sep in spec for sep in "/\\") and not spec.lower().endswith(".json"):
        return None
    path = Path(spec)
    try:
        if path.is_dir():
            inner = path / "config.json"
            if inner.is_dir():
                raise ModelConfigError(f"{inner}: a directory, not a config file")
            if inner.exists():
                return inner
            if inner.is_symlink():
                raise ModelConfigError(f"{inner}: a dangling link (its target does not exist)")
            raise ModelConfigError(f"{spec}: a directory without a config.json; give a preset name, a config.json "
                                   "or a model's directory holding one")
        if spec.endswith(("/", "\\")):
            raise ModelConfigError(f"{spec}: not a directory" if path.exists() else f"{spec}: no such directory")
        if path.exists():
            return path
        if path.is_symlink():
            raise ModelConfigError(f"{spec}: a dangling link (its target does not exist)")
    except OSError as exc:
        raise ModelConfigError(f"cannot read model config {spec!r}: {exc.strerror or exc}") from None
    if spec.lower().endswith(".json"):
        return path  # the reader names the missing file
    if any(sep in spec for sep in "/\\"):
        raise ModelConfigError(f"{spec}: no such file or directory (not a preset name either)")
    return None


def load_model(spec: str, seq_length: int | None = None, warn: Callable[[str], None] | None = None) -> TransformerConfig:
    """A preset name, or a Hugging Face config (:func:`model_config_path` says which; ``warn``: the
    reader's warnings, :func:`piper.frontend.hf.config_from_hf`)."""
    path = model_config_path(spec)
    if path is not None:
        return load_hf_config(path, seq_length=seq_length, warn=warn)
    return preset(spec)
