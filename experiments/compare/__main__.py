"""``python -m experiments.compare``: see the package docstring."""

import sys

from experiments.compare.cli import cli
from piper.core.stopping import exit_promptly

sys.exit(exit_promptly(cli()))
