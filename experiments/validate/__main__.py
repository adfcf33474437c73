"""``python -m experiments.validate``: see the package docstring."""

import sys

from experiments.validate.cli import main

sys.exit(main())
