"""``python -m experiments.compare``: see the package docstring."""

import sys

from experiments.compare.cli import cli

sys.exit(cli())
