"""``python -m experiments COMMAND [ARGS...]``: runs ``python -m experiments.COMMAND ARGS...``.

Commands are the runnable modules of this package (``compare``, ``paper``, ...); their
shared code is the package ``experiments.lib``, not a command. With no command, or
``--help``, lists them.
"""

from __future__ import annotations

import pkgutil
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

#: the package of this package that is the commands' shared library, not a command
LIBRARIES = frozenset({"lib"})


def commands() -> list[str]:
    here = str(Path(__file__).resolve().parent)
    return sorted(m.name for m in pkgutil.iter_modules([here]) if not m.name.startswith("_") and m.name not in LIBRARIES)


def main(argv: Sequence[str]) -> int:
    names = commands()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m experiments COMMAND [ARGS...]   (COMMAND --help for its options)")
        print("commands: " + ", ".join(names))
        return 0 if argv else 2
    name = argv[0]
    if name not in names:
        print(f"python -m experiments: error: unknown command {name!r}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m experiments.{name}", *argv[1:]]
    runpy.run_module(f"experiments.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
