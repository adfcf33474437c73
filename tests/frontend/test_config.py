"""Model config validation, Hugging Face config.json parsing, presets and the hardware catalog."""

import json

import pytest

from piper.core.errors import UsageError
from piper.frontend import (
    HardwareError,
    ModelConfigError,
    TransformerConfig,
    config_from_hf,
    hardware,
    hardware_from_file,
    load_hf_config,
    model_params,
    preset,
)
from tests.helpers import assert_unreadable_and_invalid_json_refused

BASE = dict(name="m", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=32,
            vocab_size=16, seq_length=4)


def test_errors_are_user_errors():
    assert issubclass(ModelConfigError, UsageError) and issubclass(ModelConfigError, ValueError)
    assert issubclass(HardwareError, UsageError)


@pytest.mark.parametrize("change, field", [
    (dict(attention_heads=3), "attention_heads"),  # does not divide 8
    (dict(kv_heads=3, attention_heads=4), "kv_heads"),  # does not divide the heads
    (dict(layers=0), "layers"),
    (dict(hidden_size=-8), "hidden_size"),
    (dict(vocab_size=1.5), "vocab_size"),
    (dict(micro_batch=True), "micro_batch"),
    (dict(ffn_kind="relu"), "ffn_kind"),
    (dict(norm="batchnorm"), "norm"),
    (dict(tied_embeddings="yes"), "tied_embeddings"),
])
def test_invalid_config_names_the_field(change, field):
    with pytest.raises(ModelConfigError, match=field):
        TransformerConfig(**{**BASE, **change})


def test_with_changes_validates():
    cfg = TransformerConfig(**BASE)
    assert cfg.with_changes(micro_batch=4).micro_batch == 4
    with pytest.raises(ModelConfigError, match="seq_length"):
        cfg.with_changes(seq_length=0)
    with pytest.raises(ModelConfigError, match="unknown model field"):
        cfg.with_changes(depth=3)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ModelConfigError, match="llama3-405b") as err:
        preset("llama4")
    assert "megatron-1t" in str(err.value)
    assert preset("LLAMA3-8B").name == "llama3-8b"


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 8, "intermediate_size": 12, "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "vocab_size": 16, "max_position_embeddings": 4,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}


def test_hf_llama_config(tmp_path):
    d = tmp_path / "toy-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    cfg = load_hf_config(d / "config.json")
    assert cfg.name == "toy-llama"
    assert (cfg.layers, cfg.hidden_size, cfg.attention_heads, cfg.kv_heads, cfg.ffn_hidden_size) == (2, 8, 4, 2, 12)
    assert (cfg.vocab_size, cfg.seq_length, cfg.ffn_kind, cfg.norm) == (16, 4, "swiglu", "rmsnorm")
    assert not cfg.linear_bias and not cfg.learned_positions and not cfg.tied_embeddings
    assert model_params(cfg) == 1256  # hand count in test_frontend_costs (toy Llama)
    assert load_hf_config(d / "config.json", seq_length=2).seq_length == 2
    untied_by_default = {k: v for k, v in LLAMA_CONFIG.items() if k != "tie_word_embeddings"}
    assert not config_from_hf(untied_by_default).tied_embeddings  # LlamaConfig's default
    assert config_from_hf({**LLAMA_CONFIG, "head_dim": 2}).kv_dim == 4  # consistent head_dim is fine


def test_hf_gpt2_config(tmp_path):
    raw = {"model_type": "gpt2", "activation_function": "gelu_new", "n_layer": 2, "n_embd": 8, "n_head": 2,
           "n_positions": 4, "n_inner": None, "vocab_size": 16}
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps(raw))
    cfg = load_hf_config(path)
    assert cfg.name == "gpt2"
    assert (cfg.ffn_hidden_size, cfg.kv_heads, cfg.ffn_kind, cfg.norm) == (32, 2, "gelu", "layernorm")
    assert cfg.linear_bias and cfg.learned_positions and cfg.tied_embeddings
    assert model_params(cfg) == 1920  # the toy GPT's hand count


def test_hf_real_gpt2_small_size():
    raw = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
    assert model_params(config_from_hf(raw)) == 124_439_808  # GPT-2 small's published count


@pytest.mark.parametrize("raw, field", [
    ({k: v for k, v in LLAMA_CONFIG.items() if k != "hidden_size"}, "hidden_size"),
    ({**LLAMA_CONFIG, "num_key_value_heads": 3}, "kv_heads"),
    ({**LLAMA_CONFIG, "num_hidden_layers": "two"}, "num_hidden_layers"),
    ({**LLAMA_CONFIG, "tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ({**LLAMA_CONFIG, "head_dim": "4"}, "head_dim"),
    ({**LLAMA_CONFIG, "num_local_experts": 8}, "num_experts_per_tok"),  # experts without top-k
    ({**LLAMA_CONFIG, "num_local_experts": 8.0, "num_experts_per_tok": 2}, "num_local_experts"),
])
def test_hf_bad_config(raw, field):
    with pytest.raises(ModelConfigError, match=field):
        config_from_hf(raw)


def test_hf_unreadable(tmp_path):
    assert_unreadable_and_invalid_json_refused(load_hf_config, ModelConfigError, tmp_path)


def test_hardware_catalog():
    a100 = hardware("a100-80gb")
    # memory: nvidia-smi's memory.total of an A100 80 GB, 81,920 MiB (issue 30)
    assert (a100.peak_flops, a100.memory_bytes, a100.devices_per_node) == (312e12, 81920 * 2**20, 8)
    assert (a100.nvlink_bandwidth, a100.network_bandwidth) == (300e9, 25e9)  # DGX A100: 200 Gb/s per GPU
    h100 = hardware("h100")
    assert h100.name == "h100-sxm-80gb" and h100.network_bandwidth == 50e9  # DGX H100: 400 Gb/s per GPU
    assert hardware("h200").memory_bytes == 143771 * 2**20
    assert hardware("a100-40gb", memory_bytes=None, peak_flops=1e12).peak_flops == 1e12
    with pytest.raises(HardwareError, match="known GPUs"):
        hardware("v100")
    with pytest.raises(HardwareError, match="network_bandwidth"):
        hardware("b200", network_bandwidth=0)


def test_hardware_file(tmp_path):
    f = tmp_path / "hw.json"
    f.write_text(json.dumps({"gpu": "h100", "memory_bytes": 94e9}))
    hw = hardware_from_file(f, network_bandwidth=25e9)
    assert (hw.peak_flops, hw.memory_bytes, hw.network_bandwidth) == (989e12, 94e9, 25e9)
    f.write_text(json.dumps({"name": "mine", "peak_flops": 1e15, "memory_bytes": 1e11, "devices_per_node": 4,
                             "nvlink_bandwidth": 1e11, "network_bandwidth": 1e10}))
    assert hardware_from_file(f).devices_per_node == 4
    f.write_text(json.dumps({"peak_flops": 1e15}))
    with pytest.raises(HardwareError, match="memory_bytes"):
        hardware_from_file(f)


@pytest.mark.parametrize("change, message", [
    # two spellings of one quantity that disagree
    ({"n_layer": 3}, "num_hidden_layers = 2 and n_layer = 3 disagree"),
    ({"num_local_experts": 8, "num_experts": 16, "num_experts_per_tok": 2}, "num_local_experts = 8 and num_experts = 16"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "moe_top_k": 4}, "num_experts_per_tok = 2 and moe_top_k = 4"),
    ({"activation_function": "gelu"}, "hidden_act = 'silu' and activation_function = 'gelu' disagree"),
    # one thing said two ways
    ({"num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "moe_layer_freq": 2},
     "decoder_sparse_step = 1 and moe_layer_freq = 2: both say"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2, "shared_expert_intermediate_size": 12},
     "n_shared_experts = 2 and shared_expert_intermediate_size = 12"),
    # values read loosely before
    ({"attention_dropout": "0.1"}, "attention_dropout must be a dropout probability in \\[0, 1\\), got '0.1'"),
    ({"attention_dropout": True}, "attention_dropout must be a dropout probability"),
    ({"resid_pdrop": 5}, "resid_pdrop must be a dropout probability"),
    ({"hidden_dropout": -0.1}, "hidden_dropout must be a dropout probability"),
    ({"hidden_act": "banana"}, "hidden_act 'banana' is not one this reader knows"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "scoring_func": False}, "scoring_func must be a string, got False"),
    ({"use_sliding_window": True, "sliding_window": 4}, "use_sliding_window is true but max_window_layers"),
    ({"use_sliding_window": "yes", "sliding_window": 4}, "use_sliding_window must be true or false"),
    ({"hidden_size": 8.0}, "hidden_size must be a whole number \\(an integer\\), got 8.0"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": -1},
     "first_k_dense_replace must be >= 0 and <= 2147483647, got -1"),
    ({"layer_types": ["full_attention", None], "sliding_window": 2}, "layer_types\\[1\\] None is not one of"),
    ({"text_config": {"num_hidden_layers": 4}}, "text_config holds a nested model .* give the text_config object"),
])
def test_hf_refuses_what_it_would_read_wrongly(change, message):
    """Each of these was read as another model before, without a word (issue 31's hostile-input pass)."""
    with pytest.raises(ModelConfigError, match=message):
        config_from_hf({**LLAMA_CONFIG, **change})


def test_hf_agreeing_spellings_and_dense_values_are_fine():
    cfg = config_from_hf({**LLAMA_CONFIG, "n_layer": 2, "activation_function": "silu", "attention_dropout": 0.0,
                          "use_sliding_window": False, "scoring_func": None}, warn=lambda line: None)
    assert cfg.layers == 2 and not cfg.dropout and cfg.moe is None


def test_hf_names_the_keys_it_does_not_read():
    said = []
    cfg = config_from_hf({**LLAMA_CONFIG, "rope_theta": 5e5, "multi_query": True, "parallel_attn": True},
                         warn=said.append)
    assert cfg.layers == 2
    assert said == ["hf-config: keys this reader neither reads nor knows to be without effect, not modelled: "
                    "multi_query, parallel_attn"]
    said.clear()
    config_from_hf({**LLAMA_CONFIG, "model_type": "falcon", "hidden_act": "gelu"}, warn=said.append)
    assert said == ["hf-config: model_type 'falcon' is not one this reader knows (llama, mistral, qwen2, qwen3, mixtral, "
                    "qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, gpt2, gpt_bigcode): read as the GPT-2 "
                    "family from hidden_act 'gelu'"]
    said.clear()
    config_from_hf(LLAMA_CONFIG, warn=said.append)  # every key read or known to be without effect
    assert said == []
    with pytest.warns(UserWarning, match="not modelled: bias"):  # the API's default
        config_from_hf({**LLAMA_CONFIG, "bias": False})


def test_hf_warnings_reach_stderr_and_keep_json_clean(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "multi_query": True}))
    r = cli("piper", "model", str(path), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)
    assert "piper: warning: " in r.stderr and "not modelled: multi_query" in r.stderr


def test_hf_warnings_are_one_line_and_come_only_for_a_valid_config():
    said = []
    config_from_hf({**LLAMA_CONFIG, "bad\nkey": 1}, warn=said.append)
    assert said == ["hf-config: keys this reader neither reads nor knows to be without effect, not modelled: 'bad\\nkey'"]
    said.clear()
    with pytest.raises(ModelConfigError, match="hidden_act"):
        config_from_hf({**LLAMA_CONFIG, "hidden_act": "banana", "multi_query": True}, warn=said.append)
    assert said == []  # the error alone


def test_hf_qwen2_windows_from_max_window_layers():
    """transformers' Qwen2Attention without layer_types: layer i is windowed when use_sliding_window
    is true and i >= max_window_layers; false, or a first windowed layer past the last, is full attention."""
    qwen = {**LLAMA_CONFIG, "model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 2}
    cfg = config_from_hf({**qwen, "use_sliding_window": True, "max_window_layers": 1})
    assert (cfg.sliding_window, cfg.sliding_window_layers) == (2, (1, 2, 3))
    for off in ({"use_sliding_window": False, "max_window_layers": 1}, {"use_sliding_window": True, "max_window_layers": 4}):
        assert config_from_hf({**qwen, **off}).sliding_window is None
    # layer_types, when given, decides
    cfg = config_from_hf({**qwen, "use_sliding_window": True, "max_window_layers": 1,
                          "layer_types": ["sliding_attention"] + ["full_attention"] * 3})
    assert cfg.sliding_window_layers == (0,)
