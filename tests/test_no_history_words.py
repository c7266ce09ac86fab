"""No tracked file names the sitting or the ticket a change came from.

memfit's code, tests, docs and results say what was measured and cite a result by its folder or
date (``benchmarks/results/2026-12-04-h200-plan-proof/``), never by how the work was organised.
This scans every file git tracks under src/, tests/, docs/, benchmarks/ and README.md (so a
virtual environment or a build output is never read), its path and its text, for a numbered
sitting or ticket, and lists every offending ``file:line``. Gzipped files are checked by name
only (they hold machine output); other binary files are skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "tests", "docs", "benchmarks", "README.md")

# Built from pieces so that this file's own text holds no match. A word, an optional plural,
# then a number, on the same line or at the start of the next (a sentence wrapped mid-phrase).
_WORDS = "|".join(("sess" + "ion", "iss" + "ue"))
HISTORY = re.compile(rf"(?:{_WORDS})s?[ \t]*(?:\n[ \t#>*-]*)?[0-9]", re.IGNORECASE)


def _tracked() -> list[str]:
    """The tracked files under :data:`SCANNED`, as paths relative to the repository root."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    listed = subprocess.run(
        [git, "ls-files", "-z", "--", *SCANNED],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [p for p in listed.stdout.decode().split("\0") if p]


def offending_lines(paths: list[str]) -> list[str]:
    """``path:line: text`` for each match in the paths' names (line 0) and their text."""
    found: list[str] = []
    for rel in paths:
        if HISTORY.search(rel):
            found.append(f"{rel}:0: (the file's name)")
        path = ROOT / rel
        if rel.endswith(".gz") or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", errors="replace")
        lines = sorted({text.count("\n", 0, m.start()) + 1 for m in HISTORY.finditer(text)})
        found += [f"{rel}:{n}: {text.splitlines()[n - 1].strip()[:120]}" for n in lines]
    return found


def test_the_pattern_finds_a_numbered_sitting_or_ticket() -> None:
    word, ticket = "Sess" + "ion", "iss" + "ue"
    assert HISTORY.search(f"measured in {word} 26")
    assert HISTORY.search(f"see {ticket}13")
    assert HISTORY.search(f"the {ticket}s 13 and 14")
    assert HISTORY.search(f"as in {word.lower()}\n    # 19")
    assert not HISTORY.search(f"a profiling {word.lower()} on the H200")
    assert not HISTORY.search(f"the host {ticket}s ops")
    assert not HISTORY.search(f"user-1000.slice/{word.lower()}-3.scope")


def test_no_tracked_file_names_the_development_history() -> None:
    found = offending_lines(_tracked())
    assert not found, (
        f"{len(found)} place(s) name a numbered sitting or ticket; say what was measured and "
        "cite the result by its folder or date instead:\n" + "\n".join(found)
    )
