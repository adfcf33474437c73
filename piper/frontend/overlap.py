"""How much compute Megatron-LM hides the data-parallel resync behind, per schedule.

With ``--overlap-grad-reduce`` and ``--overlap-param-gather`` (the distributed optimizer) a stage's
gradient reduce-scatter and weight all-gather run during its compute (docs/problem.md §10: the
workload's ``resyncOverlapTime`` per node = the window x (forward + backward of one micro-batch)).
The window, in micro-batches of the whole stage:

* **1F1B and no pipelining: 1.** Gradients are synchronized only in the last micro-batch's backward
  pass (``no_sync`` for the others, Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``,
  ``forward_backward_no_pipelining`` / ``forward_backward_pipelining_without_interleaving``), the
  buckets reduce-scattered as they fill; the all-gather runs in the next iteration's first forward
  pass (forward pre-hooks, one bucket ahead).
* **Interleaved 1F1B, v chunks per device, p stages: ((v - 1) p + 1) / v** (at most the m
  micro-batches per replica). ``forward_backward_pipelining_with_interleaving`` launches a chunk's
  gradient sync (``config.grad_sync_func[chunk]``) as soon as the chunk's last micro-batch has run
  its backward pass; the cooldown runs the chunks' last micro-batches chunk after chunk, p at a
  time, so the syncs of chunks v-1..1 ((v - 1)/v of the bytes) run while the device still works
  through (v - 1) p chunk-backward passes, (v - 1) p / v micro-batches of the stage, and chunk 0's
  sync overlaps its own last backward pass (1/v); the weight all-gathers mirror this in the warm-up
  (``config.param_sync_func[chunk + 1]`` is launched at chunk's first forward pass). Pooling the
  window this way is optimistic by at most chunk 0's own exposed part, max(0, R/v - one chunk's
  backward pass), where R is the stage's resync time.
"""

from __future__ import annotations

from piper.core.errors import FrontendError

__all__ = ["overlap_microbatches"]


def overlap_microbatches(pp: int, vp: int, microbatches: int) -> float:
    """The window of the module docstring, micro-batches of one stage (p stages, v chunks each,
    m micro-batches per replica)."""
    for name, value in (("pp", pp), ("vp", vp), ("microbatches", microbatches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FrontendError(f"{name} must be a whole number >= 1, got {value!r}")
    if vp == 1:
        return 1.0
    return min(float(microbatches), ((vp - 1) * pp + 1) / vp)
