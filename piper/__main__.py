"""``python -m piper COMMAND ...``: the planner's command line (:mod:`piper.cli.main`).

User errors (bad file, bad JSON, invalid problem or plan, bad flag) exit with
status 2 and a one-line message on stderr.
"""

import sys

from piper.cli.common import run_main
from piper.cli.main import main
from piper.core.stopping import exit_promptly

if __name__ == "__main__":
    sys.exit(exit_promptly(run_main(main, prog="piper")))
