"""The code's revision, recorded with every benchmark's rows."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

__all__ = ["revision"]

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def revision() -> str:
    """The code's revision: the short git commit, plus ``+dirty-HASH`` when tracked files
    differ from it (HASH: the first 12 hex digits of the SHA-1 of ``git diff HEAD``, so two
    runs share a revision only if they ran the same code), or ``unknown`` outside git."""
    head = _git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    rev = head.strip()
    diff = _git("diff", "HEAD", "--no-ext-diff", "--binary")
    if diff is None:
        return f"{rev}+dirty-unknown"
    if diff:
        return f"{rev}+dirty-{hashlib.sha1(diff.encode()).hexdigest()[:12]}"
    return rev
