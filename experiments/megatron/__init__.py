"""``python -m experiments.megatron [--out DIR] [--quick] [--json] [--quiet]``: the cost model against
published training runs (issue 21).

Sources (copied into ``experiments/data/``, see ``experiments/data/README.md``):

* [SC21] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC'21: Table 1 (ten GPT models on DGX A100 80 GB nodes of 8 GPUs,
  their tensor/pipeline sizes, batch sizes and achieved TFLOP/s per GPU) and equation (3),
  the FLOPs of one iteration with full recomputation,
  F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
* [L3] "The Llama 3 Herd of Models" (2024), Table 4: Llama 3 405B on 16,384 H100 80 GB
  (TP 8, CP 1, PP 16, DP 128, sequence 8,192, 2,048 sequences per batch): 400 TFLOP/s per GPU.

What it computes, per row of [SC21] Table 1:

1. parameters and FLOPs per iteration of the front end's model against [SC21]'s parameter
   column and equation (3) (relative differences);
2. Megatron's own configuration scored by the one evaluator (``piper.core.evaluate``): the
   workload of ``piper.frontend.build_workload`` (A100 80 GB, nodes of 8, gpus / 8 nodes,
   the row's micro-batch and global batch, sequence 2,048, no distributed optimizer: it
   postdates SC'21), the uniform plan Megatron ran (p stages of l/p transformer layers, the
   embedding in the first stage, final norm and output head in the last, degree t,
   d = gpus / (t p), TMPC ``full`` on every transformer layer, ``none`` elsewhere), its
   fullest stage's memory, and its predicted TFLOP/s per GPU = equation (3)'s FLOPs /
   ``Score.batch_time`` / gpus. ONE compute efficiency (``TrainingSetup.efficiency``, the
   fraction of peak the layers' matrix multiplies reach) is calibrated on ONE row
   (:data:`CALIBRATION_ROW`) so that its prediction equals its published TFLOP/s (bisection:
   the prediction rises monotonically with the efficiency), and every row is then scored
   with it. Rows run with the interleaved schedule in [SC21] (``virtual_stage_layers``) are
   scored with the evaluator's plain 1F1B batch time (no interleaving is modelled);
3. the planner's best plan for the same workload and GPU count (Piper's DP through the
   registry, ``piper.solve(..., "dp")``, uniform plans and free plans), under a time
   limit per solve; a row the DP cannot finish or refuses is recorded as ``not run: why``.

and for [L3] Table 4 (16,384 GPUs): Meta's layout (16 stages of 7, 8 x 14, 7 layers: the
first and last stages hold one layer fewer, [L3] Section 3.3.2; TP 8; DP 128; micro-batch 1;
distributed optimizer) scored with the least recomputation that fits, its predicted model
TFLOP/s per GPU (model FLOPs, no recomputation: [L3] reports BF16 MFU) against 400, and
the planner's plan if it finishes within the limit.

Outputs: ``OUT/megatron.csv`` (one row per model, units in the column names),
``OUT/megatron.png`` (predicted vs published TFLOP/s per GPU), ``OUT/MEGATRON.md`` (the
tables), and the tables on stdout (``--json``: one JSON object instead).
"""
