"""``python -m experiments.validate [--out DIR] [--quick] [--no-loo] [--json] [--quiet]``
(``--planner [--table sc21|published]``: the planner's plan against each row's layout instead): the cost
model (``piper/frontend/``) against published training runs, each row scored by
``python -m piper score``'s logic (:func:`piper.frontend.score.score_layout`, the one evaluator's
batch time) from the row's own settings (issue 30; it absorbs ``python -m experiments.megatron``).

Tables (copied into ``experiments/data/`` with attribution, ``experiments/data/README.md``):

* [SC21] Narayanan et al. SC'21 Table 1: ten GPT models on A100 (published time from eq. (3));
* the Megatron-LM README's H100 weak-scaling table (published time from the README's FLOP count);
* [L3] Llama 3 Table 4's rows without context parallelism (H100; Megatron's FLOP count).

Fitted constants: per accelerator, the matrix products' e_max and d0 (``fit.py``) on that
accelerator's Megatron table only (A100: SC'21; H100: the README table); every other constant
is the catalog's, with its source. Reported per row: the in-sample error (constants fitted on
all rows of its table) and the **leave-one-out** error (constants fitted without the row); the
Llama 3 rows are predicted with the H100 constants of the README table (out of sample).
Also: the planner's memory for [K22]'s four models against the paper's formulas (``memory.py``).

Outputs in ``--out`` (default ``out/validate``): ``validation.csv`` (one row per published row,
units in the column names), ``validation.png`` (predicted vs published iteration time),
``VALIDATION.md`` (the tables), and the tables on stdout (``--json``: one JSON object instead).
"""
