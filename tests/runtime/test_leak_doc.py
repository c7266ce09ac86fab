"""The example in docs/leaks.md leaks, and the report shown there is the one it prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).parents[2] / "docs" / "leaks.md"


def test_the_docs_example_leaks_and_prints_the_report_shown(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
):
    pytest.importorskip("transformers")
    blocks = re.findall(r"```(\w*)\n(.*?)```", DOC.read_text(), flags=re.S)
    code = next(body for lang, body in blocks if lang == "python" and "LeakDetector" in body)
    shown = next(body for lang, body in blocks if lang == "" and "grew for" in body)
    script = tmp_path / "train.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "train.py", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    first = shown.splitlines()[0]
    assert printed.splitlines()[0] == first
    holder = next(line for line in shown.splitlines() if "held by val_losses" in line)
    assert holder in printed
