"""Mixture-of-experts and MLA model descriptions: parameter counts, layer patterns, HF configs."""

from __future__ import annotations

import pytest

from piper.core.errors import ModelConfigError
from piper.frontend import costs
from piper.frontend.hf import config_from_hf
from piper.frontend.moe import (
    MLAConfig,
    MoEConfig,
    is_moe_layer,
    mla_attention_params,
    moe_layer_count,
)
from piper.frontend.presets import MOE_PUBLISHED, PRESETS

#: published counts agree within 2% (total) and 2% (active): the difference is what the sources
#: round or leave out (QK-norms, attention sinks, DeepSeek's routing bias buffer)
TOLERANCE = 0.02


@pytest.mark.parametrize("name", list(MOE_PUBLISHED))
def test_total_and_active_parameters_match_the_published_figures(name):
    total_b, active_b, with_embedding = MOE_PUBLISHED[name]
    cfg = PRESETS[name]
    assert costs.model_params(cfg) / 1e9 == pytest.approx(total_b, rel=TOLERANCE)
    assert costs.active_params(cfg, input_embedding=with_embedding) / 1e9 == pytest.approx(active_b, rel=TOLERANCE)


def test_mixtral_layer_by_hand():
    # h 4096, kv 1024 (8 heads of 128), F 14336, SwiGLU, 8 experts, no biases, RMSNorm
    cfg = PRESETS["mixtral-8x7b"]
    part, experts = costs.moe_layer_params(cfg)
    assert part.attention_matmul == 4096 * (4096 + 2 * 1024) + 4096 * 4096
    assert part.mlp_matmul == 0 and part.split_bias == 0
    assert part.replicated == 2 * 4096 + 4096 * 8  # two RMSNorms + the router
    assert experts == 8 * 3 * 4096 * 14336
    assert costs.model_params(cfg) == 32 * (part.total + experts) + 2 * 32000 * 4096 + 4096


def test_deepseek_mla_by_hand():
    mla = MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    matmul, norms = mla_attention_params(mla, 7168, 128)
    assert matmul == (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168)
    assert norms == 1536 + 512
    no_q_lora = MLAConfig(q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert mla_attention_params(no_q_lora, 7168, 128)[0] - matmul == 7168 * 128 * 192 - (7168 * 1536 + 1536 * 128 * 192)


def test_gpt_oss_biases_by_hand():
    cfg = PRESETS["gpt-oss-120b"]
    part, experts = costs.moe_layer_params(cfg)
    h, q, kv = 2880, 64 * 64, 8 * 64
    assert part.attention_matmul == h * (q + 2 * kv) + q * h
    assert part.split_bias == q + 2 * kv  # the q, k, v biases
    assert part.replicated == 2 * h + h + h * 128 + 128  # norms, o_proj bias, router with bias
    assert experts == 128 * (3 * h * 2880 + 2 * 2880 + h)


def test_which_layers_are_moe():
    ds = MoEConfig(experts=8, top_k=2, expert_ffn_hidden_size=4, first_dense_layers=3)
    assert [is_moe_layer(ds, i) for i in range(5)] == [False, False, False, True, True]
    every_other = MoEConfig(experts=8, top_k=2, expert_ffn_hidden_size=4, layer_freq=2)
    assert [is_moe_layer(every_other, i) for i in range(4)] == [True, False, True, False]
    qwen_step2 = MoEConfig(experts=8, top_k=2, expert_ffn_hidden_size=4, layer_freq=2, layer_offset=1)
    assert [is_moe_layer(qwen_step2, i) for i in range(4)] == [False, True, False, True]
    assert moe_layer_count(ds, 61) == 58 and moe_layer_count(None, 4) == 0


def test_moe_flops_use_active_parameters():
    cfg = PRESETS["mixtral-8x7b"]
    s = cfg.seq_length
    part, _ = costs.moe_layer_params(cfg)
    expected = 2 * s * (part.attention_matmul + 2 * 3 * 4096 * 14336) + s * 2 * 4096 * 8 + 4 * s * s * 4096
    assert costs.moe_layer_forward_flops(cfg) == pytest.approx(expected)
    assert costs.model_flops_per_iteration(cfg, 1) == pytest.approx(32 * 3 * expected + 3 * 2 * s * 4096 * 32000)


@pytest.mark.parametrize("changes, field", [
    ({"experts": 1}, "experts"), ({"top_k": 9}, "top_k"), ({"top_k": 2.0}, "top_k"),
    ({"router_score": "relu"}, "router_score"), ({"capacity_factor": 0.5}, "capacity_factor"),
    ({"shared_experts": 1}, "shared_experts"), ({"layer_freq": 0}, "layer_freq"),
])
def test_bad_moe_fields_are_named(changes, field):
    base = {"experts": 8, "top_k": 2, "expert_ffn_hidden_size": 16}
    with pytest.raises(ModelConfigError, match=field):
        MoEConfig(**{**base, **changes})


DEEPSEEK_V3_HF = {  # deepseek-ai/DeepSeek-V3 config.json, the keys the reader uses and a few it ignores
    "model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": False, "n_group": 8, "topk_group": 4,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "num_nextn_predict_layers": 1, "ep_size": 1,
}
QWEN3_30B_HF = {  # Qwen/Qwen3-30B-A3B config.json
    "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False, "attention_bias": False,
}
GPT_OSS_HF = {  # openai/gpt-oss-120b config.json
    "model_type": "gpt_oss", "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
    "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_local_experts": 128, "experts_per_token": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "attention_bias": True, "sliding_window": 128,
}


@pytest.mark.parametrize("raw, preset", [(DEEPSEEK_V3_HF, "deepseek-v3"), (QWEN3_30B_HF, "qwen3-30b-a3b"),
                                         (GPT_OSS_HF, "gpt-oss-120b")])
def test_hf_configs_give_the_presets(raw, preset):
    cfg = config_from_hf(raw, name=preset, seq_length=4096)
    want = PRESETS[preset]
    assert cfg.moe == want.moe and cfg.mla == want.mla and cfg.attention_head_dim == want.attention_head_dim
    assert costs.model_params(cfg) == costs.model_params(want)


def test_layer_train_flops_at_counts_moe_layers_with_active_parameters():
    ds = PRESETS["deepseek-v3"]
    assert costs.layer_train_flops_at(ds, 0, "none") == costs.layer_train_flops(ds, "none")  # a dense layer
    fwd = costs.moe_layer_forward_flops(ds)
    assert costs.layer_train_flops_at(ds, 3, "full") == 4 * fwd
    total = sum(costs.layer_train_flops_at(ds, i, "selective") for i in range(ds.layers))
    assert total == pytest.approx(costs.stack_train_flops(ds, "selective"))
