"""``python -m experiments.paper``: see the package docstring."""

import sys

from .cli import main

sys.exit(main())
