"""The limits on every input: files, JSON, numbers and flags (docs/errors.md lists them all).

Every value is range-checked where it is read, against the constants here, so that no
solver, kernel or sum over a graph ever sees a number it cannot hold:

* counts (k, N, G, degrees t, d, virtual stages, layer indices, thread counts, ...) are
  whole numbers in 1..:data:`MAX_COUNT` (a signed 32-bit integer: the DP's kernels and the
  exact models multiply two of them in 64 bits);
* every time, byte count, bandwidth and factor of a workload or hardware file is at most
  :data:`MAX_MAGNITUDE` (1e30), and a quantity that must be > 0 and divides another (M, B,
  B_in, f) is at least :data:`MIN_POSITIVE` (1e-30). Then a stage time is at most 1e30 /
  1e-30 = 1e60 per term, a sum over the largest graph a file may hold (fewer than 1e8
  layers) times N and v stays below 1e90, far from a float's 1.8e308: no sum, product or
  big-M of any solver overflows to infinity;
* node ids are integers of magnitude at most :data:`MAX_NODE_ID` (2^53: exactly a float);
* seconds (``--time-limit``, ``--hard-timeout``) are finite and at most :data:`MAX_SECONDS`.

The reader (:func:`piper.io.jsonfile.read_json`) refuses a file over its kind's size in
:data:`MAX_FILE_BYTES`, nesting deeper than :data:`MAX_JSON_DEPTH`, an integer literal longer
than :data:`MAX_INT_DIGITS` digits, and a number that overflows a float.
"""

from __future__ import annotations

__all__ = [
    "MAX_COUNT", "MAX_MAGNITUDE", "MIN_POSITIVE", "MAX_NODE_ID", "MAX_SECONDS", "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH", "MAX_INT_DIGITS", "FIFO_WAIT_S", "MAX_MODEL_LAYERS", "MAX_SEED", "MAX_THREADS", "MAX_VIRTUAL_STAGES",
    "MIN_FRACTION", "MIN_RATE", "MEMORY_RTOL",
]

#: the memory test's relative tolerance (docs/problem.md §3.3): a stage fits when its memory is at most
#: M (1 + MEMORY_RTOL). The evaluator and every solver test against that one cap, so that a plan whose
#: memory is M to the last bit in one summation order and an ulp above it in another is judged alike
#: (a sum of n terms differs by about n 2^-53 relative between orders; 1e-12 leaves room for 10^3-term
#: sums and is under a byte below 10^12 bytes)
MEMORY_RTOL = 1e-12

#: the largest count: devices k, microbatches N, devices per node G, degrees t and d, virtual
#: stages, layer indices, threads, --max-ideals, sequence lengths, batch sizes (2^31 - 1)
MAX_COUNT = 2**31 - 1
#: the largest time, byte count, bandwidth (bytes/s) or factor a workload or hardware file may hold
MAX_MAGNITUDE = 1e30
#: the smallest value of a quantity that must be > 0 and divides others (M, B, B_in, f)
MIN_POSITIVE = 1e-30
#: the largest magnitude of a node id (2^53: every such integer is exactly a float too)
MAX_NODE_ID = 2**53
#: the longest time limit, seconds (about 116 days); infinity is refused: omit the flag instead
MAX_SECONDS = 1e7
#: the largest random seed (CP-SAT's and HiGHS' seeds are signed 32-bit integers)
MAX_SEED = 2**31 - 1
#: the largest file of each kind, bytes (a workload of 100,000 layers is about 60 MB)
MAX_FILE_BYTES: dict[str, int] = {
    "workload": 256 * 2**20,
    "plan": 64 * 2**20,
    "model config": 4 * 2**20,
    "hardware": 1 * 2**20,
}
#: how long a reader waits for a process to start writing into a named pipe (FIFO) given as an
#: input file, seconds; then it is refused as one no process writes to, instead of waiting forever
FIFO_WAIT_S = 10.0
#: the deepest nesting of arrays and objects any file may have (the formats need at most 8)
MAX_JSON_DEPTH = 32
#: the most digits of an integer literal (no field can mean a larger number than 1e30)
MAX_INT_DIGITS = 40
#: the default cap on a model's transformer layers in the front end (``--max-layers`` raises it):
#: 8 times the deepest published dense model it ships (Megatron-LM's 1T, 128 layers)
MAX_MODEL_LAYERS = 1024
#: the most solver threads a flag may ask for
MAX_THREADS = 1024
#: the smallest efficiency (a fraction of a peak: --efficiency, a hardware file's *_efficiency) the
#: front end takes: a millionth. Below it the times it divides by it leave the workload's range
#: (--efficiency 1e-300 gave a layer 1.8e298 s, refused by the workload's field name instead of the flag)
MIN_FRACTION = 1e-6
#: the smallest rate of a hardware file (peak FLOP/s, bytes/s of a link or of memory): one per
#: second, for the same reason (a link of 1e-30 bytes/s was refused as the workload's bandwidth)
MIN_RATE = 1.0
#: the largest ``max_virtual_stages`` (``--max-virtual-stages``): every chunk of an interleaved
#: plan holds a layer, so a V above a workload's layers is never reached, and the solvers list the
#: v they try (2^31 - 1 of them took all of the machine's memory: ``plan --max-virtual-stages
#: 2147483647`` was killed); 65,536 chunks per device group is far beyond any framework's
MAX_VIRTUAL_STAGES = 2**16
