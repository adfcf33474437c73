"""Piper's two-level dynamic program: a threshold search, and the table itself; and, for
version 3, the batch time and interleaved plans (below).

The problem (``docs/problem.md``): split the DAG into stages S_1..S_L (differences of
nested ideals), give stage i degrees (t_i, d_i) and one TMPC per layer, to
minimise max_i TPS_i subject to sum d_i t_i <= k, sum d_i <= N and memory.

Piper's DP is  dp[I][k'][s] = min over J < I, (t, d) of
max(dp[J][k' - t d][s - d], K(I \\ J, t, d, ceil(s / d))), where K is the stage's
knapsack (:mod:`piper.dp.knapsack`, ``Options.knapsack``) and s is a *budget* for the
sum of d of this and later stages (``algo.cpp``: "at most" semantics; y is
computed from the budget).  Stage cut edges: in-edges (u, v) with u outside I,
out-edges (v, x) with x in J (ideals are successor-closed).  Two engines compute it:

**Threshold engine** (default).  The objective is a bottleneck (a max), so:

* *stage tables*: for every ideal pair p = (I, J), allowed t (every layer of
  I \\ J has an allowed TMPC at t) and d (N mod d = 0, d <= S = min(N, k),
  t d <= k), the values K(p, t, d, y), y = 1..ceil(S / d), as runs of equal value
  ("segments").  Memory a y + b grows with y, so the exact K is non-decreasing
  in y and a run ends where its optimal choice stops fitting; when every layer's
  TMPCs share one parameter size w (all three paper workloads), cost(d) =
  cost(1) / d + a per-layer constant, so the optimal choices are computed once at
  d = 1 and priced at each d.  The greedy K is recomputed at every y (it need
  not be monotone); its d's are not merged (bit-for-bit reference semantics).
* *feasibility test* for a threshold T: g[I][s] = least devices (sum t d) to
  split ideal I into stages all of value <= T within budget s:
  f[I][s] = min over entries (J, t, d) with K(., ceil(s / d)) <= T of
  t d + g[J][s - d], g[I][s] = min_{s' <= s} f[I][s'], g[{}][.] = 0.
  A plan of value <= T exists iff g[V][S] <= k.
* *search*: the optimum is one of the table values: binary search over their
  sorted distinct values for the least feasible one.
* *bound* (exact knapsack, graphs of more than 64 layers, ``params["greedy_bound"]``
  to force or disable): the greedy DP's value U is solved first; then stage
  values above U are never computed (a (t, d) is dropped once its value, which
  grows with y, passes U) and the search runs over candidates <= U.
* *curve*: m(T) = g[V][S] is the least number of devices reaching T; the best
  TPS with at most k' devices is the least candidate T with m(T) <= k', found
  for all requested k' by divide and conquer over the candidates.

**Table engine** (``params["engine"] = "table"``; chosen automatically when the
stage tables would be large: ideal pairs x options > 20 M, e.g. GNMT): the
dp[I][k'][s] table itself, one pass over the ideal pairs, each stage's knapsacks
solved on the fly.  Per I, pass 1 enters the cheap values (all-fastest fits, and
for the exact knapsack the least-memory choice as an achievable upper bound);
pass 2 solves a knapsack only where the stage's lower bound could still improve
the table.  Unless a curve is requested, the linearized DP (n + 1 ideals) is
solved first and terms above its value are dropped.

Curve (``stats["curve"]`` = [[k', TPS or None], ...]): ``params["curve"]`` True =
every k' = 1..k, False = none, default = every k' when cheap (k <= 64 and at most
5000 ideal pairs, e.g. BERT), else none; ``params["curve_points"]`` = a list of k'.
Curve points use the budget bound S = min(N, k) of the full k: with the exact
knapsack each point is the optimum at k' devices.

**Version 2** (docs/problem.md §2.2; ``solve_dp``): a stage's knapsack at (t, d, y) prices
each TMPC with the resync factor f, its resync at B_in when t d <= G (else B), its cut
edges at the run's B_edge, and its memory as a y + b + s / d (summed as the evaluator
does).  The d-invariant shortcut above needs, in addition, no sharded state (s / d makes
the optimal choice depend on d); f and B_resync only add a per-node constant at each d,
so they keep it.  B_edge is a property of the whole plan (B_in iff sum d t <= G), so with
G < k the DP runs twice: over plans on at most G devices with edges at B_in, and over all
plans with edges at B (a plan inside one node is scored pessimistically there when
B_in >= B); the better plan wins (``stats["runs"]``; with B_in < B the second run's plan
inside one node only bounds the optimum from below: OPTIMAL when the first run's value is
no larger, else FEASIBLE with that bound).  With G >= k (always without the new keys)
there is one run at B_in = B, f = 4, s = 0, and every number is bit-for-bit the
version-1 number: the kernels keep the reference's arithmetic (E / d + R) / B + p / d
whenever B_resync = B_edge.

**Expert parallelism** (docs/problem.md §11, rule 6): the flat arrays fold a TMPC's expert terms
into its per-(TMPC, d) numbers: f (r - 1) w_x / (r N) joins the resync bytes ``rq`` (so ``c0`` and
every stage cost carry it at the stage's B_resync) and s_x / r the per-device memory ``sq``, with
r = d t / (e e_t) (t is the TMPC's degree).  Where rule 6 forbids the TMPC (e e_t does not divide
d t) its memory is 2 M + 1 bytes: no choice holding it ever fits, so every knapsack, memory test
and bound leaves it out exactly, and a stage whose layers have no other TMPC is infeasible at
that (t, d).  Stages with such TMPCs take neither the d-invariant shortcut nor the "least-TPS
choice is least-tau" shortcut of the batch-time tables (``LayerArrays.xq``, ``has_experts``);
the identical-chain engine prices its layers the same way (:mod:`~piper.dp.groups`), and the
four keys are part of a layer's identity (:mod:`~piper.dp.chain`).  Without the keys nothing
changes (``xq`` is all False: the same compiled kernels, numbers bit for bit).

**Uniform plans** (``Options.uniform``, docs/problem.md §2.5): one DP (both runs) per
allowed (t, d) with only that pair allowed; the best wins; no curve.  Refused with a
SolverError when (t, d) pairs x runs x ideal pairs exceeds ``UNIFORM_MAX_WORK``
(``params["max_ideal_pairs"]`` sets another cap).

**Limits** (docs/errors.md §6): more ideals than ``Options.max_ideals`` or more ideal pairs
than ``params["max_ideal_pairs"]`` (default 100 M, estimated up front from a sample) is a
SolverError naming the count and the flag; the time limit and SIGINT / SIGTERM are checked
between kernel calls (:func:`piper.dp.limits.past`).

Statuses: exact knapsack -> OPTIMAL (bound = TPS) or INFEASIBLE; greedy ->
FEASIBLE (bound 0) or INFEASIBLE; time limit -> FEASIBLE (best threshold proven
feasible so far) or UNKNOWN, message "time limit ...".

**Version 3** (docs/problem.md §9; :mod:`~piper.dp.schedules`): with the defaults (objective
"tps", ``max_virtual_stages`` 1) the DP is the one above, untouched.  Otherwise each schedule's
best plan is searched and the best wins ("any": 1F1B against interleaved; ties go to 1F1B):

* *1F1B, batch time* (batch_time = N TPS + sum_i tau_i - max_i tau_i) on any graph: a DP over
  ideals (:mod:`~piper.dp.fronts`) whose states (I, s, f) hold I split into stages with d summing
  to exactly s (so y = ceil(s / d) is the true y) and a flag f "the designated stage is placed"
  (sum tau - max tau = min over a designated stage j of the other stages' tau), each state a
  Pareto front of (max TPS, sum of undesignated tau, and devices when t_max S > k).  Stage tables
  (:mod:`~piper.dp.bt_tables`) give per (pair, t, d, y) the least TPS K and the tau of that choice;
  when every node's TMPCs share one w the least-TPS choice is also a least-tau one and the DP is
  exact, else a second DP with each stage's least tau bounds the optimum (FEASIBLE unless met).
  Pruning: entries whose N T + sum (plus the least compute left on the budget and devices left)
  exceed the best known plan; an entry dominated by one at a smaller budget; stage values above
  ub / N.  Version 2's two edge runs and uniform plans (one DP per (t, d)) as for the TPS
  (:mod:`~piper.dp.batch`).
* *Identical chains* (:mod:`~piper.dp.chain`: a path whose inner layers have the same TMPCs,
  costs and edges, found from the numbers): uniform 1F1B plans and interleaved plans, both
  objectives, by counts (:mod:`~piper.dp.groups`): per layout (t, d, L groups, v chunks) and
  configuration of the cuts among the end layers, a group's value depends only on how many
  identical layers it holds (and which chunks are one layer, when sync bytes depend on the
  TMPC), so a DP over groups is exact; layouts go in the order of a lower bound and stop at the
  best plan.  Free 1F1B plans then run the DP over ideals below the best uniform plan, its stage
  tables solved once per class of segments that cost the same.
* *Interleaved plans of other graphs*: a heuristic (a few topological orders cut into chunks, each
  group's TMPCs by the knapsack) with a bound that holds for every interleaved plan
  (:mod:`~piper.dp.interleaved_any`): FEASIBLE (or UNKNOWN without a plan) unless met. On a chain
  whose inner layers differ only in their numbers the bound is also the exact optimum of its
  relaxed identical chain (:func:`~piper.dp.chain.relaxed_chain`: the least numbers over the run).

``Result.objective``, ``bound`` are then in the objective's units (``objective_kind``);
"optimal" means proven over every plan the options allow.

Units: times in the workload's time unit per sample, memory in bytes.

Modules: :mod:`~piper.dp.entry` (the entry point, version 2's edge runs, uniform plans),
:mod:`~piper.dp.runs` (edge runs, uniform (t, d) restriction), :mod:`~piper.dp.schedules`
(version 3: objectives and schedules), :mod:`~piper.dp.batch`, :mod:`~piper.dp.batch_run`,
:mod:`~piper.dp.bt_tables`, :mod:`~piper.dp.fronts` (1F1B batch time over ideals),
:mod:`~piper.dp.chain`, :mod:`~piper.dp.groups`, :mod:`~piper.dp.group_kernels` (identical
chains by counts), :mod:`~piper.dp.interleaved_any`, :mod:`~piper.dp.outcome`,
:mod:`~piper.dp.driver` (one DP run: engine, bound, search, curve, status),
:mod:`~piper.dp.arrays` (the problem as flat arrays: the kernels' argument bundles),
:mod:`~piper.dp.stage` (kernels of one stage), :mod:`~piper.dp.threshold` (threshold
engine), :mod:`~piper.dp.table_kernels` and :mod:`~piper.dp.table` (table engine),
:mod:`~piper.dp.reconstruct` (the plan behind a value, for both engines),
:mod:`~piper.dp.limits` (time limit, progress).  The kernels are compiled with
``cache=True``; numba's cache does not notice edits of a callee in another file, so after
editing :mod:`~piper.dp.stage` or :mod:`piper.dp.knapsack` delete ``piper/dp/__pycache__``.
"""

from __future__ import annotations

from piper.dp.entry import UNIFORM_MAX_WORK, solve_dp
from piper.dp.threshold import DPTables, build_tables

__all__ = ["solve_dp", "DPTables", "build_tables", "UNIFORM_MAX_WORK"]
