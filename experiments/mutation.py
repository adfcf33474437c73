"""Mutation testing of the evaluator and of the result check (issue 19 §5; not part of CI).

``python -m experiments.mutation`` copies the project's tracked files (as they are in the
working tree) to ``--out`` (default ``out/mutation``), writes a ``setup.cfg`` with a
``[mutmut]`` section there, and runs mutmut 3 (``python -m pip install mutmut``) on
``piper/core/evaluate.py`` and ``piper/core/checks.py`` (:data:`MUTATE`). Each mutant is run against
the evaluator's and the check's own test files only (:data:`TESTS`), not the whole suite.
It prints killed / total, the kill rate, and writes ``survivors.txt`` (each surviving
mutant's diff, from ``mutmut show``) and ``summary.json`` to ``--out``.

The copy keeps mutmut's ``mutants/`` directory and its cache out of the working tree;
``--out`` is reused between runs (mutmut re-runs only the mutants of changed functions).
Exit status: 0 when the kill rate is at least ``--target`` (default 0.9), 1 below it,
2 on a usage error or when mutmut is missing or fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the modules mutated
MUTATE = ("piper/core/evaluate.py", "piper/core/checks.py")
#: the test files run against every mutant
TESTS = ("tests/core/test_evaluate.py", "tests/core/test_evaluate_defaults.py", "tests/core/test_checks.py",
         "tests/test_evaluate_mutants.py")

#: mutmut 3's exit-code statuses that count as killed / as survived (the rest: not run)
KILLED = {"killed", "timeout", "segfault"}
SURVIVED = {"survived", "suspicious"}


def setup_cfg(jobs: int) -> str:
    """The ``[mutmut]`` section (setup.cfg form; the same keys go under ``[tool.mutmut]`` in a pyproject.toml)."""
    lines = ["[mutmut]", "source_paths = piper", "only_mutate ="]
    lines += [f"    {m}" for m in MUTATE]
    lines += ["also_copy =", "    baselines", "    experiments", "pytest_add_cli_args_test_selection ="]
    lines += [f"    {t}" for t in TESTS if (ROOT / t).is_file()]
    lines += ["pytest_add_cli_args =", "    -p", "    no:cacheprovider", "    -x", "    -q"]
    return "\n".join(lines) + "\n"


def copy_tree(dest: Path) -> None:
    """The tracked files as they are in the working tree (uncommitted edits included)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in files.decode().split("\0"):
        if not name or name == "pyproject.toml":  # its [tool.mutmut], if any, would win over setup.cfg
            continue
        src, dst = ROOT / name, dest / name
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)
    for name in TESTS:  # a new test file not yet committed
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, dest / name)


def statuses(tree: Path) -> dict[str, str]:
    """mutant name -> status, from ``mutmut results --all true``."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.mutation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "mutation",
                    help="work directory: the copy of the project, mutmut's cache, survivors.txt, summary.json "
                         "(default: out/mutation)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once (mutmut --max-children; default 2)")
    ap.add_argument("--target", type=float, default=0.9, help="least kill rate for exit status 0 (default 0.9)")
    ap.add_argument("--fresh", action="store_true", help="delete mutmut's previous results in --out first")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    if not 0.0 <= args.target <= 1.0:
        ap.error(f"--target must be in [0, 1], got {args.target}")
    if importlib.util.find_spec("mutmut") is None:
        print("python -m experiments.mutation: error: mutmut is not installed (python -m pip install mutmut)",
              file=sys.stderr)
        return 2
    tree = args.out.resolve() / "tree"
    if args.fresh and (tree / "mutants").exists():
        shutil.rmtree(tree / "mutants")
    tree.mkdir(parents=True, exist_ok=True)
    copy_tree(tree)
    (tree / "setup.cfg").write_text(setup_cfg(args.jobs))
    env = {**os.environ, "PYTHONPATH": ""}
    run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.jobs)], cwd=tree,
                         env=env, stdout=subprocess.DEVNULL if args.quiet else None)
    if run.returncode != 0:
        print(f"python -m experiments.mutation: error: mutmut run exited with {run.returncode}", file=sys.stderr)
        return 2
    found = statuses(tree)
    killed = sorted(k for k, s in found.items() if s in KILLED)
    survived = sorted(k for k, s in found.items() if s in SURVIVED)
    other = sorted(k for k, s in found.items() if s not in KILLED | SURVIVED)
    total = len(killed) + len(survived)
    rate = len(killed) / total if total else 0.0
    with open(args.out / "survivors.txt", "w") as fh:
        for name in survived:
            diff = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=tree, capture_output=True,
                                  text=True).stdout
            fh.write(diff + "\n")
    revision = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    tests = [t for t in TESTS if (ROOT / t).is_file()]
    summary = {"revision": revision, "mutated": list(MUTATE), "tests": tests, "killed": len(killed),
               "survived": survived, "not_run": {k: found[k] for k in other}, "total": total, "kill_rate": rate}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"mutation: {len(killed)}/{total} mutants killed ({100 * rate:.1f}%) in {', '.join(MUTATE)} at {revision}; "
          f"{len(survived)} survived (diffs in {args.out / 'survivors.txt'})"
          + (f"; {len(other)} not run" if other else ""))
    return 0 if rate >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
