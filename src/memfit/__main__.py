"""``python -m memfit``."""

from memfit.cli import entry

entry()
