"""An independent check of Megatron-LM command lines: the rules Megatron-LM enforces at start-up
(argument parsing, ``validate_args``, the Megatron-Core config dataclasses, the process groups,
the micro-batch calculator) and in the first training step (the interleaved schedule, the MoE layer,
Transformer Engine's context-parallel attention), written from Megatron's own source, not from
piper's exporter (in the spirit of networkx's ``validate_flows`` in its tests).

:func:`check_megatron_args` takes the argument list of ``export_plan(problem, plan, "megatron")
.data["args"]`` and the world size and returns one message per violated rule (empty: Megatron would
accept it). Each message starts with the rule's id (:data:`RULES`, which also says where Megatron
enforces it).

Versions followed (late 2025, Megatron-Core 0.15/0.16):

* ``ARGS`` = ``megatron/training/arguments.py`` of NVIDIA/Megatron-LM at commit
  000c4ac24f61159c138b0975def722c65245983c (the stored copy ``read_file`` returns); ``Lnnn`` is the
  line, counted in that text. ``validate_args`` starts at L347, ``core_transformer_config_from_args``
  at L1241.
* ``MC`` = Megatron-Core 0.16.1, the PyPI sdist ``megatron_core-0.16.1.tar.gz`` (``megatron/core/...``,
  exact line numbers). The stored copies read alongside say the same where they overlap:
  ``transformer_config.py`` @ 002526d81b81f6ab534e93844f9a228709887494 (newer: it also allows
  ``moe_shared_expert_overlap`` with the flex dispatcher and backends deepepv2 / ncclep),
  ``model_parallel_config.py`` @ 02aa3ee454b5ff16b1bf356ec36fa0cc1c26858f,
  ``num_microbatches_calculator.py`` @ 00caa53af30912914981c86f39db123961678bbd.
* ``TE`` = transformer_engine 2.20.2 (PyPI wheel), ``transformer_engine/pytorch/attention/
  dot_product_attention/{context_parallel,dot_product_attention}.py``: Megatron hands
  ``--cp-comm-type`` and the window to it unchanged (MC ``extensions/transformer_engine.py`` L1252).

Where versions differ: ``--moe-flex-dispatcher-backend`` is a field of MC's ``TransformerConfig``
(L682, ``Literal['deepep', 'hybridep']``) and is passed as a flag to ``pretrain_gpt.py`` by later
Megatron-LM scripts, but ARGS @ 000c4ac does not declare it (it has ``--moe-enable-deepep``): this
checker accepts it, with MC's choices. ARGS' help of ``--cp-comm-type`` says
"allgather", MC's ``TransformerConfig.cp_comm_type`` docstring (L736) and TE (L5746, L5778) take only
"all_gather": this checker follows TE. Megatron-LM before the ``--no-overlap-p2p-communication``
default (e.g. arguments.py @ 307dcf3, 2024) required p > 2 for every interleaved schedule; this
checker requires p > 2 only with ``--no-overlap-p2p-communication`` (ARGS L602-611).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["FLAGS", "RULES", "check_megatron_args", "parse_megatron_args", "rule_ids"]

ARGS = "megatron/training/arguments.py@000c4ac"
MC = "Megatron-Core 0.16.1 megatron/core"
TE = "transformer_engine 2.20.2 pytorch/attention/dot_product_attention"

#: rule id -> where Megatron enforces it (file, version, line)
RULES: dict[str, str] = {
    # -- parsing ---------------------------------------------------------------------------------
    "flag": f"{ARGS} L93-106: argparse.ArgumentParser(allow_abbrev=False).parse_args(): unknown flag, "
            "missing or ill-typed value, value outside choices (add_argument calls of _add_*_args)",
    # -- parallel sizes --------------------------------------------------------------------------
    "world-size": f"{ARGS} L374 `assert args.world_size % total_model_size == 0` (tp*pp*cp); "
                  f"{MC}/parallel_state.py L740",
    "expert-grid": f"{MC}/parallel_state.py L792 `world_size % expert_tensor_model_pipeline_parallel_size` "
                   f"(etp*ep*pp; etp defaults to tp: {ARGS} L439-440, {MC}/model_parallel_config.py L413)",
    "expert-dp-order": f"{MC}/parallel_state.py L808: without pp-last rank order (--use-tp-pp-dp-mapping) "
                       "and pp > 1 the expert data-parallel size must equal the data-parallel size",
    "optimizer-instances": f"{MC}/parallel_state.py L835 (dp*cp) and L1264 (expert dp) % "
                           "--num-distributed-optimizer-instances",
    # -- batch -----------------------------------------------------------------------------------
    "micro-batch": f"{ARGS} L522-523 `assert args.micro_batch_size is not None / > 0`, L529 global batch > 0",
    "global-batch": f"{MC}/num_microbatches_calculator.py L340 `global_batch_size % "
                    "micro_batch_times_data_parallel_size == 0`, L349 `num_micro_batches >= 1`",
    "interleaved-microbatches": f"{MC}/pipeline_parallel/schedules.py L995-1003 (group size in [pp, M]) and "
                                "L1007-1015 (M % group 0 or >= pp); group = "
                                "--microbatch-group-size-per-virtual-pipeline-stage or pp "
                                f"({MC}/model_parallel_config.py L448)",
    # -- layers over pipeline stages -------------------------------------------------------------
    "virtual-flags": f"{ARGS} L532-543: at most one of --num-layers-per-virtual-pipeline-stage, "
                     "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout",
    "layout-stages": f"{ARGS} L549 `num_stages % args.pipeline_model_parallel_size == 0`; "
                     f"{MC}/transformer/pipeline_parallel_layer_layout.py L40",
    "layout-syntax": f"{MC}/transformer/pipeline_parallel_layer_layout.py L283-318 parse_str_to_list "
                     "(assert at L315: characters E, L, t, m; x*n and (..)*n unrolled)",
    "layout-content": f"{MC}/transformer/pipeline_parallel_layer_layout.py L94-111 validate_layer_layout: "
                      "first E, last L, each once, as many t as --num-layers, no m without --mtp-num-layers",
    "layout-conflict": f"{MC}/transformer/transformer_config.py L1316-1317 (layout with first/last-stage "
                       "or account-for flags), L1294-1300 (first/last-stage with account-for flags)",
    "virtual-uneven": f"{ARGS} L559: --num-layers-per-virtual-pipeline-stage excludes "
                      "--decoder-first/last-pipeline-num-layers",
    "layers-per-stage": f"{ARGS} L572 and L599 `num_layers % transformer_pipeline_model_parallel_size == 0` "
                        f"(+1 per account-for flag), L576 per stage % layers per virtual stage; "
                        f"{MC}/transformer/transformer_block.py L156, L175",
    "uneven-stages": f"{MC}/transformer/transformer_config.py L1368-1432: first/last stage > 0 layers "
                     "(L1369, L1388) and divisible by vpp (L1377, L1396), middle layers iff middle stages "
                     "(L1407), divisible by them (L1415), per middle rank divisible by vpp (L1429)",
    "interleaved-pp": f"{ARGS} L604 (pp > 1) and L608 (pp > 2 with --no-overlap-p2p-communication); "
                      f"{MC}/parallel_state.py L746",
    # -- attention shape and tensor parallelism --------------------------------------------------
    "required": f"{ARGS} L822-825 required_args num_layers, hidden_size, num_attention_heads, "
                "max_position_embeddings",
    "heads-tp": f"{MC}/transformer/transformer_config.py L924-925 num_attention_heads % tp",
    "query-groups-tp": f"{MC}/transformer/transformer_config.py L939-943 num_query_groups a multiple or "
                       f"divisor of tp (groups only with --group-query-attention: {ARGS} L1285-1288)",
    "heads-groups": f"{TE}/dot_product_attention.py L929-930 heads % num_gqa_groups; "
                    f"{MC}/transformer/attention.py L294",
    "kv-channels": f"{ARGS} L839-840 `assert args.hidden_size % args.num_attention_heads == 0` "
                   "without --kv-channels",
    "max-position": f"{ARGS} L856 `max_position_embeddings >= seq_length`",
    # -- sequence parallelism --------------------------------------------------------------------
    "sp-without-tp": f"{ARGS} L922-928 switches --sequence-parallel off at tp 1 (warning only); "
                     f"{MC}/model_parallel_config.py L409-411 raises without that step (strict mode)",
    "sp-tokens": f"{MC}/tensor_parallel/mappings.py L68-70: the sequence (per context-parallel rank) "
                 "splits evenly over tp",
    "moe-sp": f"{MC}/transformer/moe/moe_layer.py L379-383 (raises in training: MoE with tp > 1 needs "
              f"--sequence-parallel); {MC}/model_parallel_config.py L440-444 (warning for ep > 1)",
    "tp-comm-overlap": f"{ARGS} L931 --tp-comm-overlap needs --sequence-parallel",
    # -- distributed optimizer and overlap -------------------------------------------------------
    "overlap-param-gather": f"{ARGS} L626 (--use-distributed-optimizer or --use-megatron-fsdp), "
                            "L628 (--overlap-grad-reduce), L630 (not --use-legacy-models)",
    "overlap-param-gather-step": f"{ARGS} L664-671: distributed optimizer, --overlap-param-gather, "
                                 "interleaved schedule, --ckpt-format torch (use_dist_ckpt = ckpt_format != "
                                 "'torch', megatron/training/utils.py update_use_dist_ckpt)",
    "gloo-dist-ckpt": f"{ARGS} L1095-1100 --disable-gloo-process-groups with the distributed optimizer "
                      "needs a distributed checkpoint format",
    # -- context parallelism ---------------------------------------------------------------------
    "cp-seq": f"{ARGS} L843-846 `seq_length % (context_parallel_size * 2) == 0`",
    "cp-hierarchical": f"{ARGS} L434 (cp == prod(sizes)), L435-437 (a2a+p2p needs "
                       f"--hierarchical-context-parallel-sizes); {MC}/parallel_state.py L984",
    "cp-comm-type-count": f"{ARGS} L1298-1299 (one type, else the list); "
                          f"{MC}/transformer/transformer_config.py L1930 `len(cp_comm_type) == num_layers`",
    "cp-comm-type-value": f"{TE}/context_parallel.py L5731-5778 (p2p, a2a+p2p, all_gather, a2a, else "
                          f"ValueError 'Unsupported communication type'); {MC}/transformer/transformer_config.py "
                          "L736 docstring",
    "cp-window": f"{TE}/context_parallel.py L5691-5694: sliding-window layers need cp_comm_type a2a or "
                 "all_gather",
    "cp-a2a-heads": f"{TE}/context_parallel.py L4644-4647 (a2a: heads and kv heads per tp rank % cp) and "
                    "L591-595 (a2a+p2p: the all-to-all view splits the heads by its size)",
    # -- recomputation ---------------------------------------------------------------------------
    "recompute-full": f"{MC}/transformer/transformer_config.py L1166-1169 (full needs --recompute-method "
                      "uniform or block) and L1172-1176 (and --recompute-num-layers)",
    "recompute-selective": f"{ARGS} L914-917 (no --recompute-method); "
                           f"{MC}/transformer/transformer_config.py L1179-1184 (no --recompute-num-layers)",
    "recompute-modules": f"{MC}/transformer/transformer_config.py L1197-1221 (allowed names, moe_act needs "
                         "--moe-grouped-gemm, mla_up_proj needs --multi-latent-attention), L1243-1247 (not "
                         "moe_act/layernorm under fp8 delayed scaling)",
    "distribute-saved-activations": f"{ARGS} L899-908 (tp > 1, full, a method); "
                                    f"{MC}/transformer/transformer_config.py L1187-1188 (not with sequence "
                                    "parallelism)",
    "cuda-graph-recompute": f"{ARGS} L1204, L1212-1214: CUDA graphs exclude full recomputation",
    # -- precision -------------------------------------------------------------------------------
    "fp16-bf16": f"{ARGS} L724, L734; {MC}/transformer/transformer_config.py L915",
    "fp8-param-gather": f"{MC}/transformer/transformer_config.py L1027-1028 (needs --fp8-format); "
                        f"{ARGS} L683-685 (needs the distributed optimizer or an FSDP)",
    "fp4-fp8": f"{ARGS} L688-689, L692-693; {MC}/transformer/transformer_config.py L1031-1035",
    "fp8-recipe": f"{MC}/transformer/transformer_config.py L1020-1021 (custom recipe needs "
                  "--fp8-quantizer-factory), L990-991 (--first-last-layers-bf16 not with delayed scaling), "
                  "L1000-1014 (bf16 layer counts in [0, num_layers / pp])",
    "router-padding-fp8": f"{MC}/transformer/transformer_config.py L1613-1630 (--moe-router-padding-for-fp8 "
                          "needs fp8/fp4 and not the allgather dispatcher)",
    "grouped-gemm-bf16": f"{ARGS} L876-877 `assert args.bf16` for --moe-grouped-gemm",
    # -- MLA, rotary, window attention -----------------------------------------------------------
    "mla": f"{MC}/transformer/transformer_config.py L1558-1559 (no --rotary-interleaved), L2068-2069 "
           f"(rope fusion only with yarn; fusion off unless rope positions: {ARGS} L1004-1005)",
    "rope-type": f"{ARGS} L1290-1296: --rope-type other than rope only with --multi-latent-attention",
    "window": f"{MC}/transformer/transformer_config.py L196 (window_size a pair), {ARGS} L277-285 "
              f"(list patterns), {MC}/transformer/utils.py L459-462 (the list is indexed by layer number)",
    # -- mixture of experts and token dispatchers ------------------------------------------------
    "ep-experts": f"{ARGS} L1037-1040 (ep > 1 needs --num-experts, num_experts % ep); "
                  f"{MC}/transformer/transformer_config.py L1048-1049",
    "ep-fp16": f"{ARGS} L1041-1042: expert parallelism not with --fp16",
    "moe-without-experts": f"{MC}/transformer/transformer_config.py L1058-1061 (--moe-ffn-hidden-size needs "
                           "--num-experts)",
    "moe-layer-freq": f"{MC}/models/gpt/gpt_layer_specs.py L587-592 (list length == num_layers), "
                      f"{ARGS} L282 (pattern characters)",
    "moe-bias-etp": f"{MC}/transformer/transformer_config.py L1588-1591 `Bias in Moe is only supported "
                    "when ETP==1` (biases are on unless --disable-bias-linear)",
    "moe-flex": f"{MC}/transformer/moe/token_dispatcher.py L1346 (flex needs etp*ep > 1); "
                f"{MC}/transformer/transformer_config.py L1064-1065 (--moe-enable-deepep needs flex), "
                "L1075-1079 (flex with deepep does not pad to capacity)",
    "moe-shared-overlap": f"{MC}/transformer/transformer_config.py L1090-1094 (alltoall only in 0.16.1)",
    "moe-capacity": f"{MC}/transformer/transformer_config.py L1110-1127 (capacity factor needs load balancing "
                    "aux_loss, seq_aux_loss, global_aux_loss or none), L1132-1134 (padding needs a factor)",
    "moe-router": f"{MC}/transformer/transformer_config.py L1593-1595 (expert bias needs sigmoid), L1633-1641 "
                  "(top-1 softmax needs --moe-router-pre-softmax), L1649-1661 (group-limited routing)",
    "moe-ep-overlap": f"{MC}/transformer/transformer_config.py L1852-1884 (--overlap-moe-expert-parallel-comm "
                      "needs ep > 1, alltoall/flex, vpp when pp > 1, no full recomputation, bf16/fp16)",
}


def rule_ids(messages: Sequence[str]) -> set[str]:
    """The rule ids of :func:`check_megatron_args`'s messages."""
    return {m.split(":", 1)[0] for m in messages}


# ------------------------------------------------------------------------------------------------
# the parser: the flags whose rules are checked, as ARGS declares them (dest, kind, default, choices)
# kinds: true/false (store_true/store_false), int, float, str, ints+ / strs+ / strs* (nargs),
# freq (moe_freq_type, ARGS L310-333), tuple (tuple_type, ARGS L335-345)
# ------------------------------------------------------------------------------------------------

_CKPT = ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor")
_LB = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")

FLAGS: dict[str, tuple[str, str, Any, tuple | None]] = {
    # distributed (_add_distributed_args, _add_moe_args)
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", "int", 1, None),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", "int", 1, None),
    "--context-parallel-size": ("context_parallel_size", "int", 1, None),
    "--expert-model-parallel-size": ("expert_model_parallel_size", "int", 1, None),
    "--expert-tensor-parallel-size": ("expert_tensor_parallel_size", "int", None, None),
    "--cp-comm-type": ("cp_comm_type", "strs+", ["p2p"], None),
    "--hierarchical-context-parallel-sizes": ("hierarchical_context_parallel_sizes", "ints+", None, None),
    "--num-layers-per-virtual-pipeline-stage": ("num_layers_per_virtual_pipeline_stage", "int", None, None),
    "--num-virtual-stages-per-pipeline-rank": ("num_virtual_stages_per_pipeline_rank", "int", None, None),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", "str", None, None),
    "--decoder-first-pipeline-num-layers": ("decoder_first_pipeline_num_layers", "int", None, None),
    "--decoder-last-pipeline-num-layers": ("decoder_last_pipeline_num_layers", "int", None, None),
    "--account-for-embedding-in-pipeline-split": ("account_for_embedding_in_pipeline_split", "true", False, None),
    "--account-for-loss-in-pipeline-split": ("account_for_loss_in_pipeline_split", "true", False, None),
    "--microbatch-group-size-per-virtual-pipeline-stage": ("microbatch_group_size_per_vp_stage", "int", None, None),
    "--no-overlap-p2p-communication": ("overlap_p2p_comm", "false", True, None),
    "--use-tp-pp-dp-mapping": ("use_tp_pp_dp_mapping", "true", False, None),
    "--num-distributed-optimizer-instances": ("num_distributed_optimizer_instances", "int", 1, None),
    "--use-distributed-optimizer": ("use_distributed_optimizer", "true", False, None),
    "--overlap-grad-reduce": ("overlap_grad_reduce", "true", False, None),
    "--overlap-param-gather": ("overlap_param_gather", "true", False, None),
    "--overlap-param-gather-with-optimizer-step": ("overlap_param_gather_with_optimizer_step", "true", False, None),
    "--use-megatron-fsdp": ("use_megatron_fsdp", "true", False, None),
    "--ckpt-format": ("ckpt_format", "str", "torch_dist", _CKPT),
    # training
    "--micro-batch-size": ("micro_batch_size", "int", None, None),
    "--global-batch-size": ("global_batch_size", "int", None, None),
    "--decrease-batch-size-if-needed": ("decrease_batch_size_if_needed", "true", False, None),
    "--sequence-parallel": ("sequence_parallel", "true", False, None),
    "--tp-comm-overlap": ("tp_comm_overlap", "true", False, None),
    "--use-legacy-models": ("use_legacy_models", "true", False, None),
    "--disable-gloo-process-groups": ("enable_gloo_process_groups", "false", True, None),
    "--recompute-activations": ("recompute_activations", "true", False, None),
    "--recompute-granularity": ("recompute_granularity", "str", None, ("full", "selective")),
    "--recompute-method": ("recompute_method", "str", None, ("uniform", "block")),
    "--recompute-num-layers": ("recompute_num_layers", "int", None, None),
    "--recompute-modules": ("recompute_modules", "strs*", None, None),
    "--distribute-saved-activations": ("distribute_saved_activations", "true", False, None),
    "--disable-bias-linear": ("add_bias_linear", "false", True, None),
    "--no-rope-fusion": ("apply_rope_fusion", "false", True, None),
    "--rope-type": ("rope_type", "str", None, ("rope", "yarn")),
    "--cuda-graph-impl": ("cuda_graph_impl", "str", "none", ("none", "local", "transformer_engine")),
    # network size
    "--num-layers": ("num_layers", "int", None, None),
    "--hidden-size": ("hidden_size", "int", None, None),
    "--ffn-hidden-size": ("ffn_hidden_size", "int", None, None),
    "--num-attention-heads": ("num_attention_heads", "int", None, None),
    "--kv-channels": ("kv_channels", "int", None, None),
    "--group-query-attention": ("group_query_attention", "true", False, None),
    "--num-query-groups": ("num_query_groups", "int", 1, None),
    "--max-position-embeddings": ("max_position_embeddings", "int", None, None),
    "--position-embedding-type": ("position_embedding_type", "str", "learned_absolute",
                                  ("learned_absolute", "rope", "mrope", "relative", "none")),
    "--rotary-interleaved": ("rotary_interleaved", "true", False, None),
    "--normalization": ("normalization", "str", "LayerNorm", ("LayerNorm", "RMSNorm")),
    "--swiglu": ("swiglu", "true", False, None),
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", "true", False, None),
    "--multi-latent-attention": ("multi_latent_attention", "true", False, None),
    "--window-size": ("window_size", "tuple", None, None),
    "--window-attn-skip-freq": ("window_attn_skip_freq", "freq", None, None),
    # data
    "--seq-length": ("seq_length", "int", None, None),
    # mixed precision, Transformer Engine
    "--bf16": ("bf16", "true", False, None),
    "--fp16": ("fp16", "true", False, None),
    "--fp8-format": ("fp8", "str", None, ("e4m3", "hybrid")),
    "--fp8-recipe": ("fp8_recipe", "str", "delayed", ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")),
    "--fp8-quantizer-factory": ("fp8_quantizer_factory", "str", None, None),
    # arguments.py (_add_transformer_engine_args): type=int, default=1; choices most_recent, max
    "--fp8-amax-history-len": ("fp8_amax_history_len", "int", 1, None),
    "--fp8-amax-compute-algo": ("fp8_amax_compute_algo", "str", "most_recent", ("most_recent", "max")),
    "--fp8-param-gather": ("fp8_param_gather", "true", False, None),
    "--first-last-layers-bf16": ("first_last_layers_bf16", "true", False, None),
    "--num-layers-at-start-in-bf16": ("num_layers_at_start_in_bf16", "int", 1, None),
    "--num-layers-at-end-in-bf16": ("num_layers_at_end_in_bf16", "int", 1, None),
    "--fp4-format": ("fp4", "str", None, ("e2m1",)),
    "--fp4-param-gather": ("fp4_param", "true", False, None),
    "--transformer-impl": ("transformer_impl", "str", "transformer_engine", ("local", "transformer_engine")),
    # MLA (_add_mla_args)
    "--q-lora-rank": ("q_lora_rank", "int", None, None),
    "--kv-lora-rank": ("kv_lora_rank", "int", 32, None),
    "--qk-head-dim": ("qk_head_dim", "int", 128, None),
    "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", "int", 64, None),
    "--v-head-dim": ("v_head_dim", "int", 128, None),
    # MoE (_add_moe_args)
    "--num-experts": ("num_experts", "int", None, None),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", "int", None, None),
    "--moe-router-topk": ("moe_router_topk", "int", 2, None),
    "--moe-layer-freq": ("moe_layer_freq", "freq", 1, None),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", "int", None, None),
    "--moe-shared-expert-overlap": ("moe_shared_expert_overlap", "true", False, None),
    "--moe-router-score-function": ("moe_router_score_function", "str", "softmax", ("softmax", "sigmoid")),
    "--moe-router-pre-softmax": ("moe_router_pre_softmax", "true", False, None),
    "--moe-router-load-balancing-type": ("moe_router_load_balancing_type", "strs+", "aux_loss", _LB),
    "--moe-router-enable-expert-bias": ("moe_router_enable_expert_bias", "true", False, None),
    "--moe-router-num-groups": ("moe_router_num_groups", "int", None, None),
    "--moe-router-group-topk": ("moe_router_group_topk", "int", None, None),
    "--moe-router-padding-for-fp8": ("moe_router_padding_for_fp8", "true", False, None),
    "--moe-expert-capacity-factor": ("moe_expert_capacity_factor", "float", None, None),
    "--moe-pad-expert-input-to-capacity": ("moe_pad_expert_input_to_capacity", "true", False, None),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", "str", "allgather", ("allgather", "alltoall", "flex")),
    "--moe-enable-deepep": ("moe_enable_deepep", "true", False, None),
    # MC transformer_config.py L682 (not a flag of ARGS @ 000c4ac; see the module docstring)
    "--moe-flex-dispatcher-backend": ("moe_flex_dispatcher_backend", "str", "deepep", ("deepep", "hybridep")),
    "--moe-grouped-gemm": ("moe_grouped_gemm", "true", False, None),
    "--overlap-moe-expert-parallel-comm": ("overlap_moe_expert_parallel_comm", "true", False, None),
}

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher


def _eval_pattern(text: str) -> list[int]:
    """ARGS L277-285: only , digits [ ] ( ) + * are allowed, then the expression is evaluated."""
    if re.search(r"[^,\d\[\]\(\)\+\*]", text):
        raise ValueError(f"Invalid pattern: {text}")
    value = eval(text, {"__builtins__": {}}, {})  # noqa: S307 - Megatron's own parsing
    if not isinstance(value, list):
        raise ValueError(f"pattern {text!r} is not a list")
    return value


def _convert(kind: str, text: str) -> Any:
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "freq":  # moe_freq_type, ARGS L310-333
        return _eval_pattern(text) if "[" in text else int(text)
    if kind == "tuple":  # tuple_type, ARGS L335-345
        return tuple(int(i) for i in text.strip("()").split(","))
    return text


def parse_megatron_args(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``argv`` read as Megatron's argparse parser reads the flags of :data:`FLAGS`: (values by
    ``dest``, with Megatron's defaults; ``flag`` messages)."""
    values = {dest: (list(default) if isinstance(default, list) else default)
              for dest, _kind, default, _choices in FLAGS.values()}
    errors: list[str] = []
    argv = list(argv)
    i = 0

    def is_value(tok: str) -> bool:
        return not tok.startswith("-") or bool(_NEGATIVE.match(tok))

    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            errors.append(f"flag: unrecognized argument {tok!r} (no flag takes it) [{RULES['flag']}]")
            continue
        name, eq, inline = tok.partition("=")
        if name not in FLAGS:
            stray = []
            while i < len(argv) and is_value(argv[i]):  # argparse: "unrecognized arguments: --x 4"
                stray.append(argv[i])
                i += 1
            errors.append(f"flag: unrecognized argument {name!r}" + (f" (with {' '.join(stray)})" if stray else "")
                          + f" [{RULES['flag']}]")
            continue
        dest, kind, _default, choices = FLAGS[name]
        if kind in ("true", "false"):
            if eq:
                errors.append(f"flag: {name} takes no value, got {inline!r} [{RULES['flag']}]")
            values[dest] = kind == "true"
            continue
        if eq:
            raw = [inline]
        elif kind.endswith(("+", "*")):
            raw = []
            while i < len(argv) and is_value(argv[i]):
                raw.append(argv[i])
                i += 1
        else:
            raw = [argv[i]] if i < len(argv) and is_value(argv[i]) else []
            i += len(raw)
        if not raw and not kind.endswith("*"):
            errors.append(f"flag: {name} expects " + ("at least one argument" if kind.endswith("+")
                                                        else "one argument") + f" [{RULES['flag']}]")
            continue
        item = {"ints+": "int", "strs+": "str", "strs*": "str"}.get(kind, kind)
        try:
            converted = [_convert(item, r) for r in raw]
        except (ValueError, SyntaxError, TypeError) as exc:
            errors.append(f"flag: {name} {' '.join(raw)!r}: invalid value ({exc}) [{RULES['flag']}]")
            continue
        bad = [c for c in converted if choices is not None and c not in choices]
        if bad:
            errors.append(f"flag: {name} {bad[0]!r}: invalid choice (choose from {', '.join(map(str, choices))}) "
                          f"[{RULES['flag']}]")
            continue
        values[dest] = converted if kind.endswith(("+", "*")) else converted[0]
    return values, errors


# ------------------------------------------------------------------------------------------------
# the rules
# ------------------------------------------------------------------------------------------------


def _layout_stages(text: str) -> list[str]:
    """MC pipeline_parallel_layer_layout.py L283-318 parse_str_to_list, as one string per stage."""
    s = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def check_megatron_args(argv: Sequence[str], world_size: int, *, strict: bool = False,
                        model_shape: bool = True) -> list[str]:
    """The violated rules of Megatron-LM for ``argv`` launched on ``world_size`` GPUs, one message each
    (``"<rule id>: <what> [<where Megatron enforces it>]"``); [] when Megatron would accept it.

    ``strict``: also report what Megatron-LM only warns about and corrects (sequence parallelism at
    tp 1). ``model_shape``: require the model-shape flags (``required``; off for workloads that record
    no model shape, e.g. the BERT profile, whose export leaves them to the user)."""
    a, out = parse_megatron_args(argv)

    def bad(rule: str, text: str) -> None:
        out.append(f"{rule}: {text} [{RULES[rule]}]")

    g = a.get
    tp, pp, cp, ep = (g("tensor_model_parallel_size"), g("pipeline_model_parallel_size"),
                      g("context_parallel_size"), g("expert_model_parallel_size"))
    etp = g("expert_tensor_parallel_size") or tp
    sizes = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": etp}
    if any(v < 1 for v in sizes.values()) or world_size < 1:
        bad("world-size", f"sizes must be positive, got {sizes} on world size {world_size}")
        return out
    layers = g("num_layers")
    heads = g("num_attention_heads")
    seq = g("seq_length")
    experts = g("num_experts")
    moe = experts not in (None, 0)  # ARGS L1024-1025: 0 means no MoE
    mla = g("multi_latent_attention")
    # ARGS L922-928: Megatron-LM switches sequence parallelism off at tp 1
    sp = g("sequence_parallel") and tp > 1
    granularity = "selective" if g("recompute_activations") else g("recompute_granularity")  # ARGS L460-461

    # -- parallel sizes ----------------------------------------------------------------------------
    dp = None
    if world_size % (tp * pp * cp):
        bad("world-size", f"world size {world_size} is not divisible by tp {tp} x pp {pp} x cp {cp} = {tp * pp * cp}")
    else:
        dp = world_size // (tp * pp * cp)
    edp = None
    if world_size % (etp * ep * pp):
        bad("expert-grid", f"world size {world_size} is not divisible by expert tp {etp} x ep {ep} x pp {pp} "
                           f"= {etp * ep * pp}")
    else:
        edp = world_size // (etp * ep * pp)
    if g("use_tp_pp_dp_mapping") and pp > 1 and dp is not None and edp is not None and edp != dp:
        bad("expert-dp-order", f"--use-tp-pp-dp-mapping with pp {pp}: expert data-parallel size {edp} != "
                               f"data-parallel size {dp}")
    inst = g("num_distributed_optimizer_instances")
    if inst != 1 and ((dp is not None and (dp * cp) % inst) or (edp is not None and edp % inst)):
        bad("optimizer-instances", f"--num-distributed-optimizer-instances {inst} must divide dp x cp "
                                   f"{None if dp is None else dp * cp} and the expert data-parallel size {edp}")

    # -- pipeline: virtual stages (ARGS L531-585) ------------------------------------------------------
    layout = g("pipeline_model_parallel_layout")
    nlpvs, nvspr = g("num_layers_per_virtual_pipeline_stage"), g("num_virtual_stages_per_pipeline_rank")
    first, last = g("decoder_first_pipeline_num_layers"), g("decoder_last_pipeline_num_layers")
    acc_e, acc_l = g("account_for_embedding_in_pipeline_split"), g("account_for_loss_in_pipeline_split")
    acc = int(acc_e) + int(acc_l)
    vpp = None
    if (nlpvs is not None) + (nvspr is not None) + (layout is not None) > 1:
        bad("virtual-flags", "more than one of --num-layers-per-virtual-pipeline-stage, "
                             "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout")
    elif layout is not None:
        stages = _layout_stages(layout)
        if len(stages) % pp:
            bad("layout-stages", f"layout {layout!r} has {len(stages)} stages, not a multiple of pp {pp}")
        else:
            vpp = len(stages) // pp
        if first is not None or last is not None or acc:
            bad("layout-conflict", "--pipeline-model-parallel-layout with --decoder-first/last-pipeline-num-layers "
                                   "or --account-for-*-in-pipeline-split")
        flat = "".join(stages)
        unknown = sorted(set(flat) - set("ELtm"))
        if unknown:
            bad("layout-syntax", f"layout {layout!r}: invalid layer characters {unknown} (known: E, L, t, m)")
        else:
            problems = []
            if not flat or flat[0] != "E":
                problems.append("the first layer must be E (embedding)")
            if not flat or flat[-1] != "L":
                problems.append("the last layer must be L (loss)")
            if flat.count("E") != 1 or flat.count("L") != 1:
                problems.append(f"E and L must appear once each (E {flat.count('E')}, L {flat.count('L')})")
            if layers is not None and flat.count("t") != layers:
                problems.append(f"{flat.count('t')} decoder layers t, but --num-layers {layers}")
            if "m" in flat:
                problems.append("m (MTP) layers without --mtp-num-layers")
            if problems:
                bad("layout-content", f"layout {layout!r}: " + "; ".join(problems))
    elif nlpvs is not None or nvspr is not None:
        if nvspr is None:
            if first is not None or last is not None:
                bad("virtual-uneven", "--num-layers-per-virtual-pipeline-stage with "
                                      "--decoder-first/last-pipeline-num-layers")
            elif layers is not None:
                total = layers + acc
                if total % pp:
                    bad("layers-per-stage", f"{total} layers (with account-for flags) not divisible by pp {pp}")
                elif nlpvs < 1 or (total // pp) % nlpvs:
                    bad("layers-per-stage", f"{total // pp} layers per pipeline stage not divisible by "
                                            f"--num-layers-per-virtual-pipeline-stage {nlpvs}")
                else:
                    vpp = total // pp // nlpvs
        else:
            vpp = nvspr
    if vpp == 1:
        vpp = None
    if layout is None and (first is not None or last is not None) and acc:
        bad("layout-conflict", "--decoder-first/last-pipeline-num-layers with --account-for-*-in-pipeline-split")

    # -- pipeline: layers per stage (MC transformer_config.py L1364-1480, transformer_block.py L75-178)
    if layout is None and layers is not None and not (nlpvs is not None and nvspr is None):
        if first is not None or last is not None:
            rest, middle = layers, pp
            for name, n in (("first", first), ("last", last)):
                if n is None:
                    continue
                if n <= 0:
                    bad("uneven-stages", f"--decoder-{name}-pipeline-num-layers {n} must be > 0")
                elif vpp is not None and n % vpp:
                    bad("uneven-stages", f"--decoder-{name}-pipeline-num-layers {n} not divisible by vpp {vpp}")
                rest -= n
                middle -= 1
            if bool(rest) != bool(middle):
                bad("uneven-stages", f"{rest} middle layers left for {middle} middle pipeline stages")
            elif middle and rest % middle:
                bad("uneven-stages", f"{rest} middle layers not divisible by the {middle} middle stages")
            elif middle and vpp is not None and (rest // middle) % vpp:
                bad("uneven-stages", f"{rest // middle} layers per middle rank not divisible by vpp {vpp}")
        else:
            total = layers + acc
            if total % pp:
                bad("layers-per-stage", f"{total} layers (with account-for flags) not divisible by pp {pp}")
            elif vpp is not None and (total // pp) % vpp:
                bad("layers-per-stage", f"{total // pp} layers per pipeline rank not divisible by vpp {vpp}")
    if vpp is not None:
        if pp <= 1:
            bad("interleaved-pp", f"interleaved schedule (vpp {vpp}) needs pp > 1, got {pp}")
        elif not g("overlap_p2p_comm") and pp <= 2:
            bad("interleaved-pp", f"interleaved schedule with --no-overlap-p2p-communication needs pp > 2, got {pp}")

    # -- batch -------------------------------------------------------------------------------------
    mbs, gbs = g("micro_batch_size"), g("global_batch_size")
    if mbs is None or mbs <= 0:
        bad("micro-batch", f"--micro-batch-size must be given and > 0, got {mbs}")
    elif dp is not None:
        gbs = mbs * dp if gbs is None else gbs  # ARGS L524-525
        if gbs <= 0:
            bad("micro-batch", f"--global-batch-size must be > 0, got {gbs}")
        elif gbs % (mbs * dp) and not g("decrease_batch_size_if_needed"):
            bad("global-batch", f"global batch {gbs} not divisible by micro batch {mbs} x data parallel {dp}")
        elif gbs // (mbs * dp) < 1:
            bad("global-batch", f"{gbs // (mbs * dp)} micro-batches per iteration (global {gbs}, micro {mbs}, dp {dp})")
        elif vpp is not None:
            m = gbs // (mbs * dp)
            group = g("microbatch_group_size_per_vp_stage") or pp
            if not pp <= group <= m:
                bad("interleaved-microbatches", f"{m} micro-batches per replica with micro-batch group {group}: "
                                                f"the group must lie in [pp {pp}, {m}]")
            elif 0 < m % group < pp:
                bad("interleaved-microbatches", f"{m} micro-batches per replica leave a last group of {m % group} "
                                                f"< pp {pp} (group {group})")

    # -- model shape and tensor parallelism ------------------------------------------------------------
    if model_shape:
        missing = [f for f in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings")
                   if g(f) is None]
        if missing:
            bad("required", f"missing {', '.join('--' + m.replace('_', '-') for m in missing)}")
    groups = g("num_query_groups") if g("group_query_attention") else heads  # ARGS L1285-1288, MC L936-937
    if heads is not None:
        if heads % tp:
            bad("heads-tp", f"{heads} attention heads not divisible by tp {tp}")
        if groups is not None and groups % tp and tp % groups:
            bad("query-groups-tp", f"{groups} query groups neither a multiple nor a divisor of tp {tp}")
        if g("group_query_attention") and groups and heads % groups:
            bad("heads-groups", f"{heads} attention heads not divisible by {groups} query groups")
        if g("kv_channels") is None and g("hidden_size") is not None and g("hidden_size") % heads:
            bad("kv-channels", f"hidden size {g('hidden_size')} not divisible by {heads} heads (no --kv-channels)")
    if seq is not None and g("max_position_embeddings") is not None and g("max_position_embeddings") < seq:
        bad("max-position", f"--max-position-embeddings {g('max_position_embeddings')} < --seq-length {seq}")

    # -- sequence parallelism ----------------------------------------------------------------------------
    if strict and g("sequence_parallel") and tp == 1:
        bad("sp-without-tp", "--sequence-parallel at tp 1 (Megatron-LM turns it off with a warning)")
    if sp and seq is not None and seq % cp == 0 and (seq // cp) % tp:
        bad("sp-tokens", f"{seq // cp} tokens per context-parallel rank do not split evenly over tp {tp}")
    if moe and tp > 1 and not sp:
        bad("moe-sp", f"mixture of experts with tp {tp} needs --sequence-parallel")
    if g("tp_comm_overlap") and not sp:
        bad("tp-comm-overlap", "--tp-comm-overlap without (effective) --sequence-parallel")

    # -- distributed optimizer and overlap -------------------------------------------------------------
    dist_opt = g("use_distributed_optimizer")
    if g("overlap_param_gather"):
        if not (dist_opt or g("use_megatron_fsdp")):
            bad("overlap-param-gather", "--overlap-param-gather without --use-distributed-optimizer (or Megatron FSDP)")
        if not g("overlap_grad_reduce"):
            bad("overlap-param-gather", "--overlap-param-gather without --overlap-grad-reduce")
        if g("use_legacy_models"):
            bad("overlap-param-gather", "--overlap-param-gather with --use-legacy-models")
    if g("overlap_param_gather_with_optimizer_step"):
        lacking = [what for what, ok in (("--use-distributed-optimizer", dist_opt),
                                         ("--overlap-param-gather", g("overlap_param_gather")),
                                         ("an interleaved schedule", vpp is not None),
                                         ("--ckpt-format torch", g("ckpt_format") == "torch")) if not ok]
        if lacking:
            bad("overlap-param-gather-step", "--overlap-param-gather-with-optimizer-step needs " + ", ".join(lacking))
    if not g("enable_gloo_process_groups") and dist_opt and g("ckpt_format") == "torch":
        bad("gloo-dist-ckpt", "--disable-gloo-process-groups with the distributed optimizer and --ckpt-format torch")

    # -- context parallelism -----------------------------------------------------------------------------
    types = list(g("cp_comm_type"))
    hier = g("hierarchical_context_parallel_sizes")
    if cp > 1 and seq is not None and seq % (2 * cp):
        bad("cp-seq", f"--seq-length {seq} not a multiple of 2 x cp {cp}")
    if hier and math.prod(hier) != cp:
        bad("cp-hierarchical", f"--hierarchical-context-parallel-sizes {hier} multiply to {math.prod(hier)}, "
                               f"not cp {cp}")
    if "a2a+p2p" in types and not hier:
        bad("cp-hierarchical", "--cp-comm-type a2a+p2p without --hierarchical-context-parallel-sizes")
    window = g("window_size")
    skip = g("window_attn_skip_freq")
    if window is not None and (len(window) != 2 or min(window) < -1):
        bad("window", f"--window-size {window}: a pair (left, right) of sizes >= -1")
        window = None
    if skip is not None and window is not None:
        if isinstance(skip, int) and skip < 1:
            bad("window", f"--window-attn-skip-freq {skip} must be >= 1")
            window = None
        elif isinstance(skip, list) and layers is not None and len(skip) < layers:
            bad("window", f"--window-attn-skip-freq has {len(skip)} entries for {layers} layers")
            window = None  # which layers are windowed is unknown: no rule below depends on it

    def windowed(n: int) -> bool:  # MC transformer/utils.py L451-467, n 1-based
        if not window or window in ((-1, 0), (-1, -1)):
            return False  # (-1, 0) / (-1, -1): no sliding window (TE L5688-5690)
        if skip is None:
            return True
        return n % skip != 0 if isinstance(skip, int) else bool(skip[n - 1])

    if cp > 1 and layers is not None:
        if len(types) not in (1, layers):
            bad("cp-comm-type-count", f"{len(types)} --cp-comm-type values for {layers} layers (give 1 or {layers})")
        else:
            per_layer = types * layers if len(types) == 1 else types
            unknown = sorted(set(per_layer) - {"p2p", "all_gather", "a2a", "a2a+p2p"})
            if unknown:
                bad("cp-comm-type-value", f"--cp-comm-type {', '.join(unknown)}: Transformer Engine takes p2p, "
                                          "all_gather, a2a or a2a+p2p")
            ring = [n for n in range(1, layers + 1) if windowed(n) and per_layer[n - 1] not in ("a2a", "all_gather")]
            if ring:
                bad("cp-window", f"sliding-window layer {ring[0]} (1-based) runs --cp-comm-type "
                                 f"{per_layer[ring[0] - 1]} (needs a2a or all_gather)")
            if heads is not None and heads % tp == 0:
                q_local = heads // tp
                kv_local = heads // tp if mla or not g("group_query_attention") else max(1, (groups or 1) // tp)
                for kind, size in (("a2a", cp), ("a2a+p2p", (hier or [cp])[0])):
                    if kind in per_layer and (q_local % size or kv_local % size):
                        bad("cp-a2a-heads", f"--cp-comm-type {kind}: {q_local} query and {kv_local} key/value heads "
                                            f"per tensor-parallel rank do not split {size} ways")

    # -- recomputation -------------------------------------------------------------------------------------
    method, nrec = g("recompute_method"), g("recompute_num_layers")
    if granularity == "full":
        if method is None:
            bad("recompute-full", "--recompute-granularity full without --recompute-method uniform|block")
        if nrec is None:
            bad("recompute-full", "--recompute-granularity full without --recompute-num-layers")
    elif granularity == "selective":
        if method is not None:
            bad("recompute-selective", f"--recompute-granularity selective with --recompute-method {method}")
        if nrec is not None:
            bad("recompute-selective", f"--recompute-granularity selective with --recompute-num-layers {nrec}")
        modules = g("recompute_modules") or ["core_attn"]
        allowed = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"}
        if set(modules) - allowed:
            bad("recompute-modules", f"--recompute-modules {sorted(set(modules) - allowed)} not in {sorted(allowed)}")
        if "moe_act" in modules and not g("moe_grouped_gemm"):
            bad("recompute-modules", "--recompute-modules moe_act without --moe-grouped-gemm")
        if "mla_up_proj" in modules and not mla:
            bad("recompute-modules", "--recompute-modules mla_up_proj without --multi-latent-attention")
        if g("fp8") and g("fp8_recipe") == "delayed" and {"moe_act", "layernorm"} & set(modules):
            bad("recompute-modules", "--recompute-modules moe_act/layernorm with fp8 delayed scaling")
    if g("distribute_saved_activations"):
        if tp <= 1 or granularity != "full" or method is None:
            bad("distribute-saved-activations", "--distribute-saved-activations needs tp > 1, full recomputation "
                                                "and a --recompute-method")
        elif sp:
            bad("distribute-saved-activations", "--distribute-saved-activations with --sequence-parallel")
    if g("cuda_graph_impl") != "none" and granularity == "full":
        bad("cuda-graph-recompute", f"--cuda-graph-impl {g('cuda_graph_impl')} with full recomputation")

    # -- precision -------------------------------------------------------------------------------------------
    if g("fp16") and g("bf16"):
        bad("fp16-bf16", "--fp16 and --bf16 together")
    if g("fp8_param_gather"):
        if not g("fp8"):
            bad("fp8-param-gather", "--fp8-param-gather without --fp8-format")
        if not (dist_opt or g("use_megatron_fsdp")):
            bad("fp8-param-gather", "--fp8-param-gather without the distributed optimizer or an FSDP")
    if g("fp8") and g("fp4"):
        bad("fp4-fp8", "--fp8-format and --fp4-format together")
    if g("fp4_param") and not g("fp4"):
        bad("fp4-fp8", "--fp4-param-gather without --fp4-format")
    if g("fp8"):
        if g("fp8_recipe") == "custom" and not g("fp8_quantizer_factory"):
            bad("fp8-recipe", "--fp8-recipe custom without --fp8-quantizer-factory")
        if g("first_last_layers_bf16"):
            if g("fp8_recipe") == "delayed":
                bad("fp8-recipe", "--first-last-layers-bf16 with the delayed-scaling recipe")
            if layers is not None:
                most = layers // pp
                for f in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
                    if not 0 <= g(f) <= most:
                        bad("fp8-recipe", f"--{f.replace('_', '-')} {g(f)} outside [0, {most}]")
    if g("moe_router_padding_for_fp8"):
        if not (g("fp8") or g("fp4")):
            bad("router-padding-fp8", "--moe-router-padding-for-fp8 without --fp8-format / --fp4-format")
        if g("moe_token_dispatcher_type") == "allgather":
            bad("router-padding-fp8", "--moe-router-padding-for-fp8 with the allgather dispatcher")
    if g("moe_grouped_gemm") and not g("bf16"):
        bad("grouped-gemm-bf16", "--moe-grouped-gemm without --bf16")

    # -- MLA and rotary embeddings ---------------------------------------------------------------------
    fusion = g("apply_rope_fusion") and g("position_embedding_type") == "rope"  # ARGS L1004-1005
    if mla:
        if g("rotary_interleaved"):
            bad("mla", "--multi-latent-attention with --rotary-interleaved")
        if fusion and (g("rope_type") or "yarn") != "yarn":  # MLATransformerConfig.rope_type defaults to yarn
            bad("mla", f"--multi-latent-attention with rope fusion and --rope-type {g('rope_type')} (add "
                       "--no-rope-fusion)")
    elif g("rope_type") not in (None, "rope"):
        bad("rope-type", f"--rope-type {g('rope_type')} without --multi-latent-attention")

    # -- mixture of experts --------------------------------------------------------------------------------
    if ep > 1 and not moe:
        bad("ep-experts", f"--expert-model-parallel-size {ep} without --num-experts")
    elif moe and experts % ep:
        bad("ep-experts", f"{experts} experts not divisible by ep {ep}")
    if ep > 1 and g("fp16"):
        bad("ep-fp16", "expert parallelism with --fp16")
    if not moe and g("moe_ffn_hidden_size") is not None:
        bad("moe-without-experts", "--moe-ffn-hidden-size without --num-experts")
    if moe:
        freq = g("moe_layer_freq")
        if isinstance(freq, list) and layers is not None and len(freq) != layers:
            bad("moe-layer-freq", f"--moe-layer-freq lists {len(freq)} layers, --num-layers is {layers}")
        elif isinstance(freq, int) and freq < 1:
            bad("moe-layer-freq", f"--moe-layer-freq {freq} must be >= 1")
        if g("add_bias_linear") and etp != 1:
            bad("moe-bias-etp", f"linear biases (no --disable-bias-linear) with expert tensor parallelism {etp}")
        dispatcher, backend = g("moe_token_dispatcher_type"), g("moe_flex_dispatcher_backend")
        if g("moe_enable_deepep"):
            backend = "deepep"
            if dispatcher != "flex":
                bad("moe-flex", "--moe-enable-deepep without --moe-token-dispatcher-type flex")
        if dispatcher == "flex":
            if etp * ep <= 1:
                bad("moe-flex", f"the flex dispatcher needs expert tp x ep > 1, got {etp} x {ep}")
            if g("moe_pad_expert_input_to_capacity") and backend == "deepep":
                bad("moe-flex", "the flex dispatcher with the deepep backend does not pad to capacity")
        if g("moe_shared_expert_overlap") and g("moe_shared_expert_intermediate_size") and dispatcher != "alltoall":
            bad("moe-shared-overlap", f"--moe-shared-expert-overlap with the {dispatcher} dispatcher")
        lb = g("moe_router_load_balancing_type")
        lbs = lb if isinstance(lb, list) else [lb]
        if g("moe_expert_capacity_factor") is not None and g("moe_expert_capacity_factor") >= 0 and any(
                t not in ("aux_loss", "seq_aux_loss", "global_aux_loss", "none") for t in lbs):
            bad("moe-capacity", f"--moe-expert-capacity-factor with load balancing {lbs}")
        cap = g("moe_expert_capacity_factor")
        if g("moe_pad_expert_input_to_capacity") and (cap is None or cap < 0):
            bad("moe-capacity", "--moe-pad-expert-input-to-capacity without --moe-expert-capacity-factor")
        if g("moe_router_enable_expert_bias") and g("moe_router_score_function") != "sigmoid":
            bad("moe-router", "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid")
        if (g("moe_router_topk") == 1 and g("moe_router_score_function") == "softmax"
                and not g("moe_router_pre_softmax") and lbs != ["sinkhorn"]):
            bad("moe-router", "top-1 softmax routing needs --moe-router-pre-softmax")
        if g("moe_router_group_topk"):
            ngroups = g("moe_router_num_groups")
            if not ngroups:
                bad("moe-router", "--moe-router-group-topk without --moe-router-num-groups")
            elif experts % ngroups or g("moe_router_group_topk") > ngroups:
                bad("moe-router", f"{experts} experts in {ngroups} groups, top {g('moe_router_group_topk')} groups")
        if g("overlap_moe_expert_parallel_comm"):
            lacking = [what for what, ok in (("ep > 1", ep > 1), ("alltoall/flex", dispatcher in ("alltoall", "flex")),
                                             ("vpp when pp > 1", pp == 1 or vpp is not None),
                                             ("no full recomputation", granularity != "full" and method is None
                                              and nrec is None),
                                             ("bf16/fp16", g("bf16") or g("fp16"))) if not ok]
            if lacking:
                bad("moe-ep-overlap", "--overlap-moe-expert-parallel-comm needs " + ", ".join(lacking))
    return out
