"""``python -m memfit``."""

import sys

from memfit.cli import main

sys.exit(main())
