"""``python -m experiments.paper``: see the package docstring."""

import sys

from experiments.paper.cli import main

sys.exit(main())
