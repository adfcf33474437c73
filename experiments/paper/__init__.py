"""Reproduce the figures and tables of the Piper paper (NeurIPS 2021), with CSVs and PNG plots.

    python -m experiments.paper NAME [--quick] [--knapsack greedy|exact] [--out DIR]
                                     [--time-limit SECONDS] [--no-isolate] [--quiet]
                                     [--backend local|ray] [--address ADDR]

NAME is one of ``fig1``, ``fig2``, ``fig3``, ``gnmt``, ``resnet``, ``knapsack``
or ``all``. Each writes ``DIR/NAME.csv`` (default DIR ``out/paper``) (full float precision, no rounding)
and ``DIR/NAME.png``; progress goes to stderr. ``--quick`` runs a small slice
of each experiment (seconds; what the tests run). The default knapsack is the
reference's greedy heuristic, so the numbers are the paper's (the authors'
planner); ``--knapsack exact`` runs the exact DP instead.

The configurations follow the authors' driver (msr-fiddle/piper ``algo.cpp``,
``main``), which is where the paper's numbers come from:

* fig1 (``plots()``): BERT-32, N = 1920, B = 25 GiB/s, M in {1, 2, 8, 80} GiB,
  k in {8, 32, 64, 128, 512, 1024, 2048} (k > max t * N skipped); no DP, no TP,
  no AR, equi without TP and equi, as throughput relative to Piper's (TPS_piper /
  TPS_variant; 0 = no feasible plan). As in the driver, a k where Piper itself
  has no plan gets no bars (its rows say so).
* fig2 (``parallelizabilityExperiment(32, 8, N)``): BERT-32, M = 8 GiB, the
  file's bandwidth (25e9 B/s: the driver does not override it), k = 2048, N in
  {960, 512}: the best TPS for every device count from one DP run per variant
  (``Result.stats["curve"]``), the equi baselines at k in {8, 16, ..., 2048}
  and, at k = 2048, against N in {8, ..., 1024} (``runPD2BWAndWrite``).
* fig3 (``scalability()``): the planner's wall time against k in {8, 16, ...,
  2048} for BERT-32/48/64/96 (layer insertion) and N in {480, 512, 1920, 2048},
  with the file's memory (80e9 B) and bandwidth; one run per point, its wall
  time and its CPU time (on a shared machine the CPU time is the fairer one).
* gnmt / resnet (``runGNMT`` / ``runResnet``): the (k, memory GiB) pairs of the
  paper's tables, B = 25 GiB/s, the file's N; Piper's TPS, the equi baseline's
  (even split of a topological order, no TP: ``equi_nonTransformer``), their
  ratio TPS_piper / TPS_equi and Piper's running time. Every DP run honours
  ``--time-limit``; when the full DP hits it, the row is re-solved with
  ``Options.linearize`` (stages = segments of one topological order: fast, not
  exact) and says so (``linearize`` column, ``message`` with the full DP's
  status and time); a run that still hits the limit is a ``timeout`` row.
* knapsack (Appendix C): the reference greedy knapsack against the exact one
  (``piper.dp.knapsack``) on stage problems of BERT-32: every contiguous segment
  (pair of nested ideals) x t x d at the driver's Appendix C setting (8 GiB,
  k = 512, y = 2), plus a seeded random sample over M and y; and the
  end-to-end TPS of the greedy-knapsack DP against the exact DP on fig1's grid.

DP runs are isolated in a worker process (``piper.solvers.execution``; ``--no-isolate`` runs
them in-process) so that a run past its time limit is stopped and recorded instead
of hanging the experiment; ``--backend ray`` runs them in a Ray actor (on the cluster
at ``--address`` / ``RAY_ADDRESS``, or a local Ray instance), one run at a time.
"""
