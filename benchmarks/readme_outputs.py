"""Regenerate the real output shown in README.md (and any other Markdown file given).

    .venv/bin/python benchmarks/readme_outputs.py [README.md ...] [--check] [--only WORD]

A command whose output a document shows is written once, in a marker line:

    <!-- output: memfit estimate gpt2 -b 2 -s 64 | lines 1-20 -->
    ```
    ...replaced by this script...
    ```

The script runs each marked command in a shell from the repository root, with the terminal
80 columns wide (``COLUMNS=80``) and no colour, and writes ``$ COMMAND`` followed by what it
printed (stdout, then stderr) into the fenced block that follows the marker. ``| lines A-B``
keeps lines A to B of the output (1-based, inclusive) and marks each cut with ``...``;
``| lines A-`` keeps from line A to the end, ``| lines 1,5-9`` line 1 and lines 5 to 9. ``--check``
writes nothing and exits 1 when a block differs from what the command prints now (timings and
dates in the output make that a manual check, not a CI one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- output: (?P<command>.+?)(?: \| lines (?P<ranges>[\d,-]+))? -->$")
WIDTH = 80


@dataclass(frozen=True)
class Block:
    """One marked command and where its fenced output block sits in the document's lines."""

    command: str
    ranges: tuple[tuple[int, int | None], ...]  # (first, last) lines kept; () keeps all
    start: int  # index of the opening fence
    end: int  # index of the closing fence


def find_blocks(lines: list[str], path: Path) -> list[Block]:
    """Every marker of ``lines`` with the fenced block right after it."""
    blocks = []
    for index, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if match is None:
            continue
        start = index + 1
        if start >= len(lines) or not lines[start].startswith("```"):
            raise SystemExit(f"{path}:{index + 1}: a marker must be followed by a ``` block")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
        if end is None:
            raise SystemExit(f"{path}:{start + 1}: the block after the marker is not closed")
        blocks.append(Block(match["command"], parse_ranges(match["ranges"] or ""), start, end))
    return blocks


def parse_ranges(text: str) -> tuple[tuple[int, int | None], ...]:
    """``"1,5-9,30-"`` as ``((1, 1), (5, 9), (30, None))``."""
    ranges = []
    for part in filter(None, text.split(",")):
        first, dash, last = part.partition("-")
        if not dash:  # one line
            ranges.append((int(first), int(first)))
        else:
            ranges.append((int(first), int(last) if last else None))
    return tuple(ranges)


def run(command: str) -> tuple[list[str], float]:
    """The command's output lines (stdout, then stderr) at 80 columns, and its seconds."""
    env = dict(os.environ, COLUMNS=str(WIDTH), NO_COLOR="1", TERM="dumb")
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    began = time.perf_counter()
    done = subprocess.run(
        command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - began
    text = done.stdout + done.stderr
    return [line.rstrip() for line in text.rstrip("\n").splitlines()], seconds


def select(lines: list[str], ranges: tuple[tuple[int, int | None], ...]) -> list[str]:
    """The lines in ``ranges`` (1-based, inclusive), with ``...`` where lines were cut."""
    if not ranges:
        return lines
    kept: list[str] = []
    shown = 0  # lines 1..shown are either kept or marked as cut
    for first, last in ranges:
        stop = len(lines) if last is None else min(last, len(lines))
        if first > shown + 1:
            kept.append("...")
        kept += lines[first - 1 : stop]
        shown = stop
    if shown < len(lines):
        kept.append("...")
    return kept


def regenerate(path: Path, only: str | None) -> tuple[str, list[str]]:
    """The document with every marked block regenerated, and a line of log per block."""
    lines = path.read_text().splitlines()
    log = []
    # from the last block up, so that earlier indices stay valid as blocks change length
    for block in reversed(find_blocks(lines, path)):
        if only and only not in block.command:
            continue
        output, seconds = run(block.command)
        body = [f"$ {block.command}", *select(output, block.ranges)]
        lines[block.start + 1 : block.end] = body
        log.append(f"{seconds:6.1f} s  {block.command}")
        too_long = [line for line in body if len(line) > WIDTH]
        if too_long:
            log.append(f"         {len(too_long)} line(s) over {WIDTH} characters")
    return "\n".join(lines) + "\n", list(reversed(log))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "README.md"])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on a change")
    parser.add_argument("--only", help="regenerate only the commands containing this text")
    args = parser.parse_args()
    changed = False
    for path in args.paths:
        text, log = regenerate(path, args.only)
        print(f"{path}:", *log, sep="\n  ")
        if text != path.read_text():
            changed = True
            if not args.check:
                path.write_text(text)
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
