"""``python -m experiments.megatron``: see the package docstring."""

import sys

from experiments.megatron.cli import main

sys.exit(main())
