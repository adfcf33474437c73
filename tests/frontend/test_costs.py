"""Each cost formula pinned on hand-computed 2-layer toy models.

Expected numbers are worked out by hand in the comments (not by calling the
code under test). Toy GPT: l=2, h=8, a=2 (kv=2), f=32, V=16, s=4, b=2, p=2,
GELU, LayerNorm, biases, learned positions, tied embeddings. Toy Llama:
l=2, h=8, a=4, kv=2, f=12, V=16, s=4, b=1, SwiGLU, RMSNorm, no biases, rotary, untied.
"""

import pytest

from piper.frontend import TransformerConfig, costs

GPT = TransformerConfig(
    name="toy-gpt", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=32,
    vocab_size=16, seq_length=4, micro_batch=2,
)
LLAMA = TransformerConfig(
    name="toy-llama", layers=2, hidden_size=8, attention_heads=4, kv_heads=2, ffn_hidden_size=12,
    vocab_size=16, seq_length=4, ffn_kind="swiglu", norm="rmsnorm", linear_bias=False,
    learned_positions=False, tied_embeddings=False,
)


def test_gpt_layer_params():
    p = costs.layer_params(GPT)
    assert p.attention_matmul == 256  # q,k,v: 8*(8+2*8)=192, o: 8*8=64
    assert p.mlp_matmul == 512  # 2 * 8 * 32
    assert p.split_bias == 56  # qkv bias 8+16, first MLP bias 32
    assert p.replicated == 48  # 2 LayerNorms * 2*8, o-proj and second MLP biases 8+8
    assert p.total == 872  # = 12h^2 + 13h = 768 + 104 ([SC21])
    assert p.per_device(2) == 460  # (768 + 56)/2 + 48


def test_gpt_model_params():
    assert costs.embedding_params(GPT) == 160  # V*h + s*h = 128 + 32
    assert costs.final_norm_params(GPT) == 16  # LayerNorm 2h
    assert costs.head_params(GPT) == 0  # tied
    assert costs.model_params(GPT) == 1920  # 2*872 + 160 + 16
    # [SC21] closed form 12lh^2(1 + 13/(12h) + (V+s)/(12lh)) = 1536 + 208 + 160 = 1904 (no final norm)
    assert costs.sc21_params(GPT) == pytest.approx(1904)


def test_gqa_swiglu_params():
    p = costs.layer_params(LLAMA)
    assert p.attention_matmul == 192  # head_dim 2, kv_dim 4: 8*(8+8) + 64
    assert p.mlp_matmul == 288  # 3 * 8 * 12
    assert p.split_bias == 0 and p.replicated == 16  # two RMSNorms of 8
    assert costs.embedding_params(LLAMA) == 128  # no position embeddings
    assert costs.final_norm_params(LLAMA) == 8
    assert costs.head_params(LLAMA) == 128  # untied
    assert costs.model_params(LLAMA) == 1256  # 2*496 + 128 + 8 + 128


def test_flops():
    assert costs.attention_core_forward_flops(GPT) == 512  # 4 s^2 h = 4*16*8
    assert costs.layer_forward_flops(GPT) == 6656  # 2*4*768 + 512
    assert costs.head_forward_flops(GPT) == 1024  # 2*s*h*V = 2*4*8*16
    assert costs.layer_train_flops(GPT, "none") == 19968  # 3 * 6656
    assert costs.layer_train_flops(GPT, "selective") == 20480  # + 512
    assert costs.layer_train_flops(GPT, "full") == 26624  # 4 * 6656
    assert costs.layer_forward_flops(LLAMA) == 4352  # 2*4*(192+288) + 512


def test_flops_per_iteration():
    # global batch 6: 6*(2*19968 + 3*1024) and 6*(2*26624 + 3*1024)
    assert costs.model_flops_per_iteration(GPT, 6) == 258048
    assert costs.hardware_flops_per_iteration(GPT, 6) == 337920
    assert costs.hardware_flops_per_iteration(GPT, 6, "selective") == 264192  # 6*(2*20480 + 3072)
    # [SC21] eq. (3): 96*6*4*2*64 * (1 + 4/48 + 16/256) = 294912 * 1.1458333...
    assert costs.sc21_flops_per_iteration(GPT, 6) == pytest.approx(337920)


@pytest.mark.parametrize("t, recompute, sp, expected", [
    # sbh = 4*2*8 = 64; [K22] Table 2 coefficients at p=2: 10, 24, 5as/h = 5*2*4/8 = 5
    (1, "none", False, 2496),  # 64*(10 + 24 + 5)
    (2, "none", False, 1568),  # 64*(10 + 29/2)
    (2, "none", True, 1248),  # 64*39/2
    (2, "selective", False, 1408),  # 64*(10 + 12)
    (2, "selective", True, 1088),  # 64*34/2
    (2, "full", False, 128),  # 2sbh
    (2, "full", True, 64),  # 2sbh/t
])
def test_layer_activations_gpt(t, recompute, sp, expected):
    assert costs.layer_activation_bytes(GPT, t, recompute, sp) == pytest.approx(expected)


def test_layer_activations_gqa_swiglu():
    # sbh = 4*1*8 = 32; r = 1/2: split = 2*(2 + 1) + 3*2*12/8 = 15; core = 5*4*4/8 = 10
    assert costs.layer_activation_bytes(LLAMA, 1, "none", False) == pytest.approx(1120)  # 32*(10+15+10)
    assert costs.layer_activation_bytes(LLAMA, 2, "none", False) == pytest.approx(720)  # 32*(10 + 25/2)
    assert costs.layer_activation_bytes(LLAMA, 2, "selective", True) == pytest.approx(400)  # 32*25/2


def test_other_activations():
    # t = 2: embedding mask sbh = 64 bytes; final norm input 2*64; head input 2*64 + fp32 logits 4*s*b*V/t = 256
    assert costs.embedding_activation_bytes(GPT, 2, False) == 64
    assert costs.embedding_activation_bytes(GPT, 2, True) == 32
    assert costs.final_norm_activation_bytes(GPT, 2, False) == 128
    assert costs.head_activation_bytes(GPT, 2, False) == 384
    assert costs.head_activation_bytes(GPT, 2, True) == 320


def test_communication():
    assert costs.allreduce_bytes_per_device(128, 2) == 128  # 2*(1/2)*128
    assert costs.allreduce_bytes_per_device(800, 8) == 1400  # 2*(7/8)*800
    assert costs.allreduce_bytes_per_device(800, 1) == 0
    assert [costs.layer_tp_collectives(r) for r in ("none", "selective", "full")] == [4, 4, 6]


def test_unknown_recompute_is_an_error():
    with pytest.raises(ValueError, match="recompute"):
        costs.layer_train_flops(GPT, "some")
