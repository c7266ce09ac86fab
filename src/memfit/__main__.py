"""``python -m memfit``."""

from memfit._command import run

run()
