"""``python -m experiments.megatron``: see the package docstring."""

import sys

from .cli import main

sys.exit(main())
