"""``python -m experiments.compare``: see the package docstring."""

import sys

from .cli import cli

sys.exit(cli())
