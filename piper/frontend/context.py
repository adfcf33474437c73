"""Context parallelism in the model front end (docs/problem.md §11; issue 31).

A workload built for context-parallel degree c (``TrainingSetup.context_parallel``) offers, at
every degree key t, the costs of tensor-parallel degree t_tensor = t / c times context-parallel
degree c: t is the layer's *model-parallel width* (t = t_tensor x c), the devices one replica of
the layer runs on. This module holds the formulas; :func:`piper.frontend.workload.model_parallel_node_costs`
applies them to the tensor-parallel costs of :func:`piper.frontend.workload.node_costs`.

The default scheme is **Megatron-Core's ring attention** (``--context-parallel-size c --cp-comm-type p2p``;
Megatron-Core docs, "Context parallelism"; Transformer Engine's ``AttnFuncWithCPAndKVP2P``; Liu et
al., "Ring Attention with Blockwise Transformers for Near-Infinite Context", 2023, §3); the
all-to-all and Llama 3's all-gather (Dubey et al. 2024, §3.3.2) are below. Per device and
micro-batch of b sequences:

* **The sequence split.** Each sequence is cut into 2c chunks; device r holds chunks r and
  2c - 1 - r (causal load balance): s / c tokens. Every operation outside the core attention
  (products, element-wise kernels, tensor-parallel collectives, the embedding and head) is that of
  a sequence of s / c tokens at tensor-parallel degree t_tensor (:func:`local_config`). So are the
  activations kept (split over c) and the bytes a stage boundary sends (one device's: / c).
* **Ring attention: c steps.** At step i the device attends its s / c queries to the K, V block
  of device r - i. With the 2c-chunk split every step does the same work: step 0 is the causal
  attention of the local 2 chunks, steps 1..c-1 are half of an s / c x s / c block each (two
  chunk pairs of (s / 2c)^2): each step costs A_f, the causal flash attention of s / c tokens
  (forward), A_b backward.
* **The transfer.** Between steps each device sends its current K, V block to the next device
  and receives the previous one's: K_bytes = 2 p b (s / c) kv_dim / t_tensor bytes forward
  (:func:`kv_block_bytes`); the backward pass passes K, V and their gradients dK, dV: 2 K_bytes.
  Priced as an NCCL send/recv (``collective_time_s(..., "p2p", ...)``) over NVLink when the
  model-parallel width t <= G (devices per node: Megatron orders ranks tp-cp-dp-pp, so the c
  devices lie t_tensor apart), else over the network: X_f, X_b seconds.
* **Overlap rule.** Transformer Engine posts step i+1's send/recv before it runs step i's
  attention and waits for it after (Ring Attention §3: the transfer of a block is hidden when the
  compute of a block is at least as long): a step takes max(A, X). Forward: the last step sends
  nothing, A_f + (c - 1) max(A_f, X_f). Backward (``AttnFuncWithCPAndKVP2P.backward``): step 0
  sends K, V only, steps 1..c-2 send K, V and the dK, dV accumulated so far, step c-1 sends dK, dV
  only, each overlapped with its own step's attention: 2 max(A_b, X_f) + (c - 2) max(A_b, X_b).
  Recomputation (full or selective) runs the forward ring again. (:class:`RingAttention`)
* **Weights** are replicated over the c devices (parameters, ``parameterSize``,
  ``memoryUsageB`` as at t_tensor); the distributed optimizer shards its state over the d x c
  devices of the data-parallel-with-context group: ``memoryUsageShardedB`` = s / c, and its step
  over the same devices (``stepTimeSharded`` / c).
* **The weights' gradient reduction over c.** The resync over the d c devices holding the same
  shard moves f (dc - 1) w / (dc) bytes per iteration = f (d - 1) w / d (the spec's resync) +
  f (c - 1) w / (c d): the front end adds f (c - 1) w / (c N B_c) to ``timePerSample``
  (:func:`context_resync_s`), which the evaluator divides by d like the compute; B_c is the
  collective bandwidth of the c devices, NVLink when t <= G, else the network.

**Multi-head latent attention** (DeepSeek-V2/V3; Megatron-Core's ``MLASelfAttention`` passes
``--cp-comm-type`` to its core attention, and Transformer Engine's ring handles K and V of different
head widths): the ring passes each device's decompressed K and V, p b (s / c) a (d_qk + d_v) /
t_tensor bytes (d_qk = d_nope + d_rope), not the latent; the attention kernel is MLA's
(:func:`attention_widths`).

**All-to-all (``--cp-comm-type a2a``; Jacobs et al., "DeepSpeed Ulysses", 2023, §3.1; Transformer
Engine's ``AttnFuncWithCPAndQKVOA2A``).** Before the core attention each device swaps its s / c
tokens of all a / t_tensor heads for all s tokens of a / (t_tensor c) heads: one all-to-all each for
Q, K and V over the c devices; after it one for the output O; the backward pass mirrors them (dO
in, dQ, dK, dV out). Each device then runs the whole sequence's attention for its heads: the
kernel's FLOPs are c x share(s, w) / share(s / c, w) those of the local s / c tokens
(:func:`~piper.frontend.operations.attention_score_fraction`; share = 1/2 without a window), so
a sliding window stays a band. The all-to-alls are priced as the MoE dispatch's
(:func:`~piper.frontend.operations.all_to_all_time_s`, the c members t_tensor apart over t devices)
and are not overlapped with the attention (Transformer Engine overlaps them only with each other's
reordering): forward A'_f + X_f, backward A'_b + X_b (:class:`ExchangedAttention`); recomputation
runs the forward exchange again. It needs the query and the key/value heads of a tensor-parallel
rank to split c ways (a and kv_heads, MLA: a, divisible by t_tensor c; :func:`all_to_all_heads_ok`).
Activations, weights and the resync are as for the ring.

**All-gather (``--cp-comm-type allgather``; Dubey et al., "The Llama 3 Herd of Models", 2024,
§3.3.2, the scheme Meta trained its 128k-token stage with; Transformer Engine's
``AttnFuncWithCPAndKVAllGather``).** Each device all-gathers K and V of the whole sequence (its
kv_heads / t_tensor heads) and attends its two query chunks, r and 2c - 1 - r, to the keys they
see: 1 / c of the layer's causal pairs, the kernel's share priced as the all-to-all's. The
all-gathers are exposed (Transformer Engine runs them before the kernels); the backward pass
gathers K and V again (only the local ones are saved) and reduce-scatters dK and dV
(:func:`all_gather_attention`), over NVLink when t <= G, else the network, as the ring's transfer.
No requirement on the heads; sliding windows are allowed. Not counted: the gathered K, V while
the kernel runs (c x the local K, V, transient).

**Hierarchical (``--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes c1 c2``, c1 c2 = c;
Transformer Engine's ``AttnFuncWithCPAndKVP2P`` with a list of two groups).** The all-to-all above
inside each inner group of c1 devices (t_tensor apart, spanning t_tensor c1), then the ring over the
c2 groups: each device holds s / c2 tokens of a / (t_tensor c1) heads, a ring step attends one
block of them, c1 x the FLOPs of the kernel at s / c tokens and a / t_tensor heads, and passes K, V
blocks of the same bytes as the plain ring's (p b (s / c2) (k + v) / (t_tensor c1) = the
:func:`kv_block_bytes` at c). Forward: the exchange X_a2a (Q, K, V and the output among c1) plus
the ring A + (c2 - 1) max(A, X); backward likewise (:class:`HierarchicalAttention`). It needs the
heads of a tensor-parallel rank to split c1 ways and, having a ring, no sliding window.

**Which layers run which** (``TrainingSetup.cp_comm_type``, :func:`layer_comm_type`): the setup's
choice for every layer; unset, "p2p" for full-attention layers and "a2a" for sliding-window layers,
Megatron-Core's per-layer ``--cp-comm-type`` list (Transformer Engine's ring refuses a sliding
window: ``attn_forward_func_with_cp`` asserts a2a or all-gather for one, and the all-gather needs
the non-fused kernel). "p2p" with a sliding-window layer is refused, naming the flag.

With c = 1 nothing here is used: the workload is exactly the tensor-parallel one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from piper.core.errors import FrontendError
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.operations import (
    Op,
    all_to_all_time_s,
    attention_score_fraction,
    collective_time_s,
    flash_attention_time_s,
)

__all__ = [
    "ANY_SCHEMES",
    "CP_COMM_TYPES",
    "MIN_SEARCH_SEQ",
    "MIN_TOKENS_PER_DEVICE",
    "SEARCH_SCHEMES",
    "ExchangedAttention",
    "HierarchicalAttention",
    "RingAttention",
    "all_gather_attention",
    "all_to_all_attention",
    "all_to_all_group",
    "all_to_all_heads_ok",
    "attention_widths",
    "check_context",
    "context_link",
    "context_resync_s",
    "describe_comm_types",
    "hierarchical_a2a_sizes",
    "hierarchical_attention",
    "kv_block_bytes",
    "layer_comm_type",
    "layer_comm_types",
    "local_config",
    "model_parallel_degrees",
    "ring_attention",
    "uses_all_to_all",
    "with_context",
]

#: Megatron-Core's ``--cp-comm-type`` values the front end prices (``TrainingSetup.cp_comm_type``):
#: "p2p", the ring (Megatron-Core's default), "a2a", the all-to-all, "allgather", Llama 3's
#: all-gather of K and V, and "a2a+p2p", the all-to-all inside groups of c1 and a ring of c / c1
#: across them (``TrainingSetup.cp_a2a_size`` = c1; module docstring)
CP_COMM_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")
#: ``python -m piper plan --cp-comm-type any``: search the schemes (one workload each at c > 1)
SEARCH_SCHEMES = "any"
#: the schemes ``--cp-comm-type any`` searches (``TrainingSetup.cp_comm_type`` values; None: the
#: per-layer default; "a2a+p2p" with each all-to-all size of :func:`hierarchical_a2a_sizes`)
ANY_SCHEMES: tuple[str | None, ...] = (None, "a2a", "allgather", "a2a+p2p")

#: the planner searches c > 1 by default only for sequences at least this long (tokens); below it
#: the activations of one sequence are small next to the weights and a 2-way split of 8k tokens or
#: less shortens the matrix products without saving much memory (Llama 3 trained 8k sequences with
#: CP 1 and 128k with CP 16, Dubey et al. 2024 Table 4). ``--cp`` fixes c for any length.
MIN_SEARCH_SEQ = 16384
#: nor c beyond seq / this: each device keeps at least this many tokens of a sequence (s / c), so the
#: ring's per-step attention stays long enough to hide its K, V transfer (a search bound, not a rule
#: of Megatron's: ``--cp`` lifts it)
MIN_TOKENS_PER_DEVICE = 4096


def check_context(cfg: TransformerConfig, c: int, *, flash_attention: bool, comm_type: str | None = None,
                  a2a_size: int | None = None) -> None:
    """Megatron-Core's requirements on c (a :class:`FrontendError` naming ``--cp`` otherwise):
    the sequence splits into 2c chunks of whole tokens (``get_batch_on_this_cp_rank`` views it as
    2c equal chunks), the attention is Transformer Engine's fused kernel (the only one with
    context parallelism), and ``comm_type`` (``--cp-comm-type``) is one of :data:`CP_COMM_TYPES`,
    not "p2p" for a model with sliding-window layers (module docstring)."""
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise FrontendError(f"context-parallel size (--cp) must be a whole number >= 1, got {c!r}")
    if comm_type is not None and comm_type not in CP_COMM_TYPES:
        raise FrontendError(f"--cp-comm-type must be one of {', '.join(CP_COMM_TYPES)}, got {comm_type!r}")
    if c == 1:
        return
    if cfg.seq_length % (2 * c):
        raise FrontendError(f"context-parallel size (--cp) {c}: the sequence length {cfg.seq_length} must be a "
                            f"multiple of 2 x {c} = {2 * c} (Megatron-Core splits each sequence into 2c chunks)")
    if not flash_attention:
        raise FrontendError(f"context-parallel size (--cp) {c} needs fused (flash) attention: Megatron-Core runs "
                            "context parallelism only with Transformer Engine's fused attention")
    if comm_type in ("p2p", "a2a+p2p") and cfg.sliding_window_layers:
        first = cfg.sliding_window_layers[0]
        raise FrontendError(f"--cp-comm-type {comm_type}: {cfg.name}'s layer {first} (0-based) attends within a sliding "
                            f"window of {cfg.sliding_window} tokens, which Transformer Engine's ring attention refuses; "
                            "use --cp-comm-type a2a or allgather, or leave it unset (a2a on the windowed layers, "
                            "p2p elsewhere)")
    if comm_type == "a2a+p2p":
        if a2a_size is None:
            raise FrontendError("--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes C1 C2 (the "
                                "all-to-all groups' size C1 and the ring's C2, C1 x C2 = --cp)")
        if isinstance(a2a_size, bool) or not isinstance(a2a_size, int) or not 1 < a2a_size < c or c % a2a_size:
            raise FrontendError(f"--hierarchical-context-parallel-sizes: the all-to-all size {a2a_size!r} must divide "
                                f"--cp {c} and lie strictly between 1 and {c}")
    elif a2a_size is not None:
        raise FrontendError("--hierarchical-context-parallel-sizes needs --cp-comm-type a2a+p2p")


def layer_comm_type(comm_type: str | None, window: int | None) -> str:
    """The context-parallel scheme of a layer with sliding ``window`` (None: full attention) under
    the setup's ``comm_type``: that one, or unset "a2a" with a window and "p2p" without (module docstring)."""
    if comm_type is not None:
        return comm_type
    return "a2a" if window is not None else "p2p"


def layer_comm_types(cfg: TransformerConfig, comm_type: str | None) -> list[str]:
    """Each transformer layer's scheme under the setup's ``comm_type`` (:func:`layer_comm_type`)."""
    return [layer_comm_type(comm_type, cfg.attention_window(i)) for i in range(cfg.layers)]


def describe_comm_types(types: list[str]) -> str:
    """One line for people: "p2p (ring) on every layer", or the count of layers of each scheme."""
    names = {"p2p": "p2p (ring)", "a2a": "a2a (all-to-all)", "allgather": "allgather (all-gather of K, V)",
             "a2a+p2p": "a2a+p2p (all-to-all groups, a ring across them)"}
    if len(set(types)) == 1:
        return f"{names[types[0]]} on every layer"
    return ", ".join(f"{names[k]} on {types.count(k)} layers" for k in CP_COMM_TYPES if k in types)


def uses_all_to_all(cfg: TransformerConfig, comm_type: str | None) -> bool:
    """Whether some layer of ``cfg`` runs an all-to-all (the a2a or the a2a+p2p scheme) under ``comm_type``."""
    return comm_type in ("a2a", "a2a+p2p") or (comm_type is None and bool(cfg.sliding_window_layers))


def all_to_all_group(comm_type: str | None, c: int, a2a_size: int | None) -> int:
    """The devices an all-to-all spans under ``comm_type``: c1 = ``a2a_size`` for "a2a+p2p", else c."""
    return a2a_size if comm_type == "a2a+p2p" and a2a_size is not None else c


def hierarchical_a2a_sizes(cfg: TransformerConfig, c: int) -> list[int]:
    """The all-to-all sizes C1 a search of "a2a+p2p" at c tries (``plan --cp-comm-type any`` or
    ``a2a+p2p`` without ``--hierarchical-context-parallel-sizes``): every divisor of c strictly
    between 1 and c (what :func:`check_context` accepts); none for a model with sliding-window layers,
    whose ring Transformer Engine refuses. The heads' split (:func:`all_to_all_heads_ok` over C1) is
    the workload's degrees' filter, as for "a2a"."""
    if cfg.sliding_window_layers:
        return []
    return [a for a in range(2, c) if c % a == 0]


def all_to_all_heads_ok(cfg: TransformerConfig, c: int, t_tensor: int) -> bool:
    """Whether a tensor-parallel rank's query and key/value heads split c ways (the all-to-all
    scheme's requirement: a and kv_heads, MLA: a, divisible by t_tensor c)."""
    kv = cfg.split_kv_heads
    return cfg.attention_heads % (t_tensor * c) == 0 and kv % (t_tensor * c) == 0


def model_parallel_degrees(tensor_degrees: list[int], c: int, max_devices: int) -> list[int]:
    """The degree keys t = t_tensor x c of a workload with context-parallel degree c, for the
    tensor-parallel degrees allowed, that fit on ``max_devices`` devices."""
    return [tt * c for tt in tensor_degrees if tt * c <= max_devices]


def local_config(cfg: TransformerConfig, c: int) -> TransformerConfig:
    """The model as one device of the c sees it outside the core attention: s / c tokens."""
    return cfg if c == 1 else cfg.with_changes(seq_length=cfg.seq_length // c)


def attention_widths(cfg: TransformerConfig) -> tuple[int, int, int, int]:
    """(q, k, v, o): the widths of Q, K, V and of the attention output over all heads, elements per
    token. MHA / GQA: (a d, kv d, kv d, a d); MLA: (a d_qk, a d_qk, a d_v, a d_v) with d_qk = d_nope + d_rope."""
    if cfg.mla is not None:
        a, qk, v = cfg.attention_heads, cfg.mla.qk_head_dim, cfg.mla.v_head_dim
        return a * qk, a * qk, a * v, a * v
    return cfg.q_dim, cfg.kv_dim, cfg.kv_dim, cfg.q_dim


def kv_block_bytes(cfg: TransformerConfig, c: int, t_tensor: int) -> float:
    """Bytes of the K and V block one device holds and passes on per ring step (forward):
    p b (s / c) (k + v) / t_tensor (:func:`attention_widths`; MHA / GQA: 2 p b (s / c) kv_dim / t_tensor)."""
    _q, k, v, _o = attention_widths(cfg)
    return cfg.precision_bytes * cfg.micro_batch * (cfg.seq_length / c) * (k + v) / t_tensor


def context_link(hw: Hardware, t: int) -> str:
    """The link of the c devices of model-parallel width t: NVLink when t <= G, else the network."""
    return "nvlink" if t <= hw.devices_per_node else "network"


@dataclass(frozen=True)
class RingAttention:
    """One layer's ring attention for one micro-batch on one device (seconds): c steps, the
    transfer of step i+1's block overlapped with step i's attention (module docstring)."""

    #: c, the ring's devices and steps
    steps: int
    #: A_f, A_b: one step's attention, forward and backward
    attention_fwd_step_s: float
    attention_bwd_step_s: float
    #: X_f, X_b: one step's transfer of a K, V block (X_f; also the backward pass's first and last
    #: steps: K, V out, or dK, dV back) and of K, V with dK, dV (X_b: the backward pass's middle steps)
    transfer_fwd_step_s: float
    transfer_bwd_step_s: float

    @property
    def forward_s(self) -> float:
        """A_f + (c - 1) max(A_f, X_f)."""
        return self.attention_fwd_step_s + (self.steps - 1) * max(self.attention_fwd_step_s, self.transfer_fwd_step_s)

    @property
    def backward_s(self) -> float:
        """2 max(A_b, X_f) + (c - 2) max(A_b, X_b): the first step passes K, V only, the middle ones K,
        V and the dK, dV gathered so far, the last dK, dV only, each during its step's attention."""
        a = self.attention_bwd_step_s
        return 2 * max(a, self.transfer_fwd_step_s) + (self.steps - 2) * max(a, self.transfer_bwd_step_s)

    @property
    def exposed_fwd_s(self) -> float:
        """The forward transfer not hidden behind attention: (c - 1) max(0, X_f - A_f)."""
        return (self.steps - 1) * max(0.0, self.transfer_fwd_step_s - self.attention_fwd_step_s)

    @property
    def exposed_bwd_s(self) -> float:
        """2 max(0, X_f - A_b) + (c - 2) max(0, X_b - A_b)."""
        a = self.attention_bwd_step_s
        return 2 * max(0.0, self.transfer_fwd_step_s - a) + (self.steps - 2) * max(0.0, self.transfer_bwd_step_s - a)


def ring_attention(hw: Hardware, c: int, attention_fwd_step_s: float, attention_bwd_step_s: float,
                   kv_bytes: float, link: str) -> RingAttention:
    """The ring of c steps with the given per-step attention times and K, V block bytes over ``link``."""
    x_f = collective_time_s(hw, "p2p", kv_bytes, c, link)
    x_b = collective_time_s(hw, "p2p", 2.0 * kv_bytes, c, link)
    return RingAttention(c, attention_fwd_step_s, attention_bwd_step_s, x_f, x_b)


@dataclass(frozen=True)
class ExchangedAttention:
    """One layer's context-parallel attention whose exchanges are not overlapped with its kernel
    (the all-to-all and the all-gather schemes, module docstring), for one micro-batch on one device
    (seconds)."""

    #: A'_f, A'_b: the device's share of the attention kernel's work, 1 / c of the layer's (the
    #: all-to-all: all s tokens of a / (t_tensor c) heads; the all-gather: its s / c queries
    #: against the keys they see)
    attention_fwd_s: float
    attention_bwd_s: float
    #: X_f, X_b: the exchanges (all-to-all: Q, K, V and the output; dO and dQ, dK, dV. All-gather:
    #: K and V; K and V again, then the reduce-scatter of dK and dV)
    transfer_fwd_s: float
    transfer_bwd_s: float

    @property
    def forward_s(self) -> float:
        """A'_f + X_f."""
        return self.attention_fwd_s + self.transfer_fwd_s

    @property
    def backward_s(self) -> float:
        """A'_b + X_b."""
        return self.attention_bwd_s + self.transfer_bwd_s

    @property
    def exposed_fwd_s(self) -> float:
        """X_f: nothing hides the forward exchange."""
        return self.transfer_fwd_s

    @property
    def exposed_bwd_s(self) -> float:
        """X_b."""
        return self.transfer_bwd_s


def _kernel_share_s(hw: Hardware, cfg: TransformerConfig, c: int, local_fwd_flops: float, local_bwd_flops: float,
                    window: int | None) -> tuple[float, float]:
    """(A'_f, A'_b): a device's 1 / c share of the layer's attention kernel under the all-to-all and
    the all-gather schemes, c x share(s, w) / share(s / c, w) the FLOPs of the kernel at s / c tokens
    (module docstring), forward and backward (0 without a kernel)."""
    s = cfg.seq_length
    ratio = c * attention_score_fraction(s, window) / attention_score_fraction(s // c, window)

    def share(flops: float) -> float:
        return flash_attention_time_s(hw, ratio * flops) if flops > 0 else 0.0

    return share(local_fwd_flops), share(local_bwd_flops)


def all_to_all_attention(hw: Hardware, cfg: TransformerConfig, c: int, t_tensor: int, local_fwd_flops: float,
                         local_bwd_flops: float, window: int | None = None) -> ExchangedAttention:
    """The all-to-all scheme of a layer (``cfg`` the whole model, ``window`` its sliding window)
    from the FLOPs of its fused attention kernel at s / c tokens and all a / t_tensor heads
    (module docstring): the kernel over s tokens and a / (t_tensor c) heads executes c x
    share(s, w) / share(s / c, w) of them; each of Q, K, V, O (dQ, dK, dV, dO) is one all-to-all of
    the device's p b (s / c) width / t_tensor bytes among c devices spread over t_tensor c."""
    if not all_to_all_heads_ok(cfg, c, t_tensor):
        kv = cfg.split_kv_heads
        windowed = bool(cfg.sliding_window_layers)
        raise FrontendError(f"--cp {c} by all-to-all (--cp-comm-type a2a"
                            + ("; the sliding-window layers need it" if windowed else "")
                            + f") at tensor-parallel size {t_tensor}: the {cfg.attention_heads} query and {kv} "
                            f"key/value heads must divide by t x c = {t_tensor * c} (each device attends a / (t c) "
                            "heads); use --cp-comm-type " + ("allgather" if windowed else "p2p or allgather")
                            + ", or a smaller --cp or --tp")
    per_width = cfg.precision_bytes * cfg.micro_batch * (cfg.seq_length / c) / t_tensor
    exchange = sum(all_to_all_time_s(hw, per_width * w, c, t_tensor * c) for w in attention_widths(cfg))
    return ExchangedAttention(*_kernel_share_s(hw, cfg, c, local_fwd_flops, local_bwd_flops, window), exchange, exchange)


def all_gather_attention(hw: Hardware, cfg: TransformerConfig, c: int, t_tensor: int, local_fwd_flops: float,
                         local_bwd_flops: float, link: str, window: int | None = None) -> ExchangedAttention:
    """The all-gather scheme of a layer (module docstring): the kernel's share is the all-to-all's
    (c x share(s, w) / share(s / c, w) of its FLOPs at s / c tokens: the 2c-chunk split gives each
    device 1 / c of the causal pairs); forward: an all-gather of K and one of V (the whole s tokens
    of the device's kv heads, p b s width / t_tensor bytes each) among the c devices over ``link``;
    backward: the same two again (Transformer Engine saves only the local K, V) and a reduce-scatter
    of dK and of dV."""
    _q, k, v, _o = attention_widths(cfg)
    whole = cfg.precision_bytes * cfg.micro_batch * cfg.seq_length / t_tensor
    gather = sum(collective_time_s(hw, "all_gather", whole * w, c, link) for w in (k, v))
    scatter = sum(collective_time_s(hw, "reduce_scatter", whole * w, c, link) for w in (k, v))
    return ExchangedAttention(*_kernel_share_s(hw, cfg, c, local_fwd_flops, local_bwd_flops, window),
                              gather, gather + scatter)


@dataclass(frozen=True)
class HierarchicalAttention:
    """One layer's a2a+p2p attention for one micro-batch on one device (seconds; module docstring):
    the all-to-all among c1 devices (not overlapped) around a ring over c2 groups."""

    #: the ring over the c2 groups (its steps: c1 x the local kernel)
    ring: RingAttention
    #: X_a2a: the all-to-alls of Q, K, V and the output (forward), of dO and dQ, dK, dV (backward)
    exchange_s: float

    @property
    def forward_s(self) -> float:
        return self.ring.forward_s + self.exchange_s

    @property
    def backward_s(self) -> float:
        return self.ring.backward_s + self.exchange_s

    @property
    def exposed_fwd_s(self) -> float:
        return self.ring.exposed_fwd_s + self.exchange_s

    @property
    def exposed_bwd_s(self) -> float:
        return self.ring.exposed_bwd_s + self.exchange_s


def hierarchical_attention(hw: Hardware, cfg: TransformerConfig, c: int, a2a_size: int, t_tensor: int,
                           local_fwd_flops: float, local_bwd_flops: float, link: str) -> HierarchicalAttention:
    """The a2a+p2p scheme of a layer without a sliding window (module docstring) from the FLOPs of its
    fused kernel at s / c tokens and a / t_tensor heads: the all-to-all among c1 = ``a2a_size``
    devices spread over t_tensor c1, and a ring of c / c1 steps of c1 x those FLOPs each over ``link``."""
    if not all_to_all_heads_ok(cfg, a2a_size, t_tensor):
        kv = cfg.split_kv_heads
        raise FrontendError(f"--hierarchical-context-parallel-sizes {a2a_size} {c // a2a_size} at tensor-parallel size "
                            f"{t_tensor}: the {cfg.attention_heads} query and {kv} key/value heads must divide by "
                            f"t x c1 = {t_tensor * a2a_size}; use a smaller all-to-all size or --tp")
    per_width = cfg.precision_bytes * cfg.micro_batch * (cfg.seq_length / c) / t_tensor
    exchange = sum(all_to_all_time_s(hw, per_width * w, a2a_size, t_tensor * a2a_size) for w in attention_widths(cfg))
    step_f = flash_attention_time_s(hw, a2a_size * local_fwd_flops) if local_fwd_flops > 0 else 0.0
    step_b = flash_attention_time_s(hw, a2a_size * local_bwd_flops) if local_bwd_flops > 0 else 0.0
    ring = ring_attention(hw, c // a2a_size, step_f, step_b, kv_block_bytes(cfg, c, t_tensor), link)
    return HierarchicalAttention(ring, exchange)


def context_resync_s(allreduce_factor: float, gradient_bytes: float, c: int, microbatches: int,
                     bandwidth: float) -> float:
    """f (c - 1) w / (c N B_c): the weights' extra gradient reduction over the c devices, per
    micro-batch (seconds; the evaluator divides ``timePerSample`` by d). ``gradient_bytes`` w per
    device, ``bandwidth`` B_c in bytes/s."""
    if c == 1 or gradient_bytes == 0:
        return 0.0
    return allreduce_factor * (c - 1) * gradient_bytes / (c * microbatches * bandwidth)


def _flash_ops(ops: list[Op]) -> tuple[Op | None, Op | None]:
    """One device's fused attention kernel at s / c tokens, forward and backward (None: none)."""
    fwd = [o for o in ops if o.kind == "attention" and o.phase == "forward"]
    bwd = [o for o in ops if o.kind == "attention" and o.phase == "backward"]
    return (fwd[0] if fwd else None), (bwd[0] if bwd else None)


def with_context(local: Any, whole: Any, ops: list[Op] | None, attention_of: Any, c: int, *, resync_s: float,
                 distributed_optimizer: bool) -> Any:
    """A :class:`~piper.frontend.node_cost.NodeCost` at context-parallel degree c from the
    tensor-parallel costs at s / c tokens (``local``: times, activations, pipeline bytes) and at the
    whole sequence (``whole``: parameters and state, which do not depend on s but for learned
    positions); ``ops`` are ``local``'s operations (None for nodes without attention) and
    ``attention_of(forward_op, backward_op)`` builds the layer's context-parallel attention from
    its fused kernel at s / c tokens (a :class:`RingAttention` or an :class:`ExchangedAttention`)."""
    fwd_extra = bwd_extra = rec_extra = comm_extra = 0.0
    if ops:
        f_op, b_op = _flash_ops(ops)
        a_f = f_op.time_s if f_op is not None else 0.0
        a_b = b_op.time_s if b_op is not None else 0.0
        if a_f > 0 or a_b > 0:
            scheme = attention_of(f_op, b_op)
            fwd_extra = scheme.forward_s - a_f
            bwd_extra = scheme.backward_s - a_b
            recomputes = sum(1 for o in ops if o.kind == "attention" and o.phase == "recompute")
            rec_extra = recomputes * fwd_extra
            comm_extra = (1 + recomputes) * scheme.exposed_fwd_s + scheme.exposed_bwd_s
    time = local.time_per_sample_s + fwd_extra + bwd_extra + rec_extra + resync_s
    comm = local.communication_s + comm_extra + resync_s
    return dataclasses.replace(
        local,
        time_per_sample_s=time,
        communication_s=comm,
        compute_s=time - comm,
        params_per_device=whole.params_per_device,
        state_bytes=whole.state_bytes,
        sharded_state_bytes=whole.sharded_state_bytes / c,
        gradient_bytes=whole.gradient_bytes,
        forward_s=local.forward_s + fwd_extra,
        backward_s=local.backward_s + bwd_extra + rec_extra,
        step_s=whole.step_s / c if distributed_optimizer else whole.step_s,
    )
