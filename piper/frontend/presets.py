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

Every preset trains with micro-batch 1 in bf16 (2 bytes); change them with
:meth:`TransformerConfig.with_changes` or the command line.
"""

from __future__ import annotations

from pathlib import Path

from piper.core.errors import ModelConfigError
from piper.frontend.config import TransformerConfig
from piper.frontend.hf import load_hf_config

__all__ = ["MEGATRON_TABLE1", "PRESETS", "load_model", "preset", "preset_names"]

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
    return out


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


def load_model(spec: str, seq_length: int | None = None) -> TransformerConfig:
    """A preset name, or a path to a Hugging Face ``config.json``."""
    path = Path(spec)
    if spec.lower().endswith(".json") or path.is_file():
        return load_hf_config(path, seq_length=seq_length)
    return preset(spec)
