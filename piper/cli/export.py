"""``python -m piper export PLAN.json WORKLOAD.json --to megatron|deepspeed|torchtitan``:
write a plan in a training framework's terms (docs/export.md).

* ``--to megatron``: Megatron-LM command-line arguments (comment lines first, then one
  argument per line ending in a backslash, ready to follow ``python pretrain_gpt.py \\``);
* ``--to deepspeed``: the ``ds_config.json`` and the ``PipelineModule`` partition (with
  ``--out FILE``: FILE and FILE's stem + ``.pipeline.json``);
* ``--to torchtitan``: the ``[parallelism]``, ``[training]`` and ``[activation_checkpoint]``
  TOML sections.

``--out FILE`` writes the file(s) instead of printing them; ``--json`` prints one JSON
object (``Export.to_dict()``: the target's settings, ``notes``, ``text``, ``extra_files``)
and nothing else on stdout. A plan the target cannot express is refused: exit status 2 and
one line naming the stage and the rule (E1-E7). A plan that records the workload and
cluster it was made for (``madeFor``, :mod:`piper.io.provenance`) is checked against the ones
given: one warning line each on stderr, ``--strict`` refuses (and makes unknown workload
keys errors).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from piper.cli.common import add_cluster_args, add_strict_arg, check_outputs, load_saved_plan, load_workload, positive_int
from piper.core.errors import UsageError
from piper.export import TARGET_NAMES, TARGETS, Export, ExportError, export_plan
from piper.export.common import model_record_error

__all__ = ["add_export_parser", "cmd_export", "output_files"]


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``export`` on an ``add_subparsers()`` object."""
    p = sub.add_parser("export", help="write a plan as Megatron-LM arguments, a DeepSpeed config or torchtitan TOML")
    p.add_argument("plan", help="plan JSON (solve --out, plan --plan-out, or the reference output shape)")
    p.add_argument("file", help="workload JSON the plan was made for")
    p.add_argument("--to", required=True, choices=TARGETS, metavar="TARGET",
                   help=f"target framework: {', '.join(TARGETS)}")
    p.add_argument("--out", metavar="FILE",
                   help="write the export here (deepspeed: the ds_config; the partition goes to FILE's stem + "
                        ".pipeline.json) instead of printing it")
    p.add_argument("--micro-batch", type=positive_int, metavar="B",
                   help="sequences per Piper sample, for workloads that do not record it (profiled ones)")
    p.add_argument("--fit-recompute", action="store_true",
                   help="when the target cannot express the plan's per-layer recomputation, export the target's "
                        "single setting that the evaluator scores best for the same stages and (d, t) (reported "
                        "in a note with both scores) instead of refusing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict_arg(p, plan=True)
    add_cluster_args(p)
    return p


def output_files(out: str, export: Export) -> dict[str, str]:
    """Path -> content of what ``--out FILE`` writes: FILE, and per extra file FILE's stem +
    '.' + its name (``ds_config.json`` -> ``ds_config.pipeline.json``)."""
    path = Path(out)
    files = {str(path): export.text}
    for name, content in export.extra_files.items():
        files[str(path.with_name(f"{path.stem}.{name}"))] = content
    return files


def _write(files: dict[str, str]) -> None:
    for path, content in files.items():
        try:
            Path(path).write_text(content)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_export(args: argparse.Namespace) -> int:
    outputs: list[tuple[str, str | None]] = [("--out", args.out)]
    if args.out and args.to == "deepspeed":  # and FILE's stem + .pipeline.json (output_files)
        out = Path(args.out)
        if out.exists() and not out.is_file():
            raise UsageError(f"--out {args.out}: not a regular file; DeepSpeed's export writes two files, the "
                             f"config and its stem + .pipeline.json beside it: give a file's path")
        outputs.append(("--out (its pipeline file)", str(Path(args.out).with_name(f"{Path(args.out).stem}.pipeline.json"))))
    check_outputs(outputs, [("the plan", args.plan), ("the workload", args.file)])
    problem = load_workload(args.file, args, check_model=False)  # export refuses a bad model record itself:
    bad = model_record_error(problem)  # before the plan, whose madeFor check would warn about the record first
    if bad is not None:
        raise UsageError(f"cannot export to {TARGET_NAMES[args.to]}: {bad}")
    plan = load_saved_plan(args.plan, problem, strict=bool(args.strict))
    try:
        export = export_plan(problem, plan, args.to, micro_batch=args.micro_batch, fit_recompute=args.fit_recompute)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    files = output_files(args.out, export) if args.out else {}
    _write(files)
    if args.json:
        print(json.dumps({**export.to_dict(), "files_written": list(files)}))
        return 0
    name = TARGET_NAMES[args.to]
    if files:
        for path in files:
            print(f"wrote {path}")
        if args.to == "deepspeed":
            for note in export.notes:
                print(f"note: {note}")
        return 0
    if args.to == "deepspeed":
        print(f"# {name} ds_config.json")
        print(export.text, end="")
        for fname, content in export.extra_files.items():
            print(f"# PipelineModule partition ({fname}); pass it as in 'how_to' (docs/export.md)")
            print(content, end="")
        for note in export.notes:
            print(f"# note: {note}")
        return 0
    print(export.text, end="")
    return 0
