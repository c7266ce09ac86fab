"""Add curves measured by ``memfit calibrate`` to a calibration memfit ships (issue 13).

    PYTHONPATH=src python benchmarks/calibration_add.py SHIPPED.json MEASURED.json CURVE [...]
        --note "attention with dropout 2026-12-03"

Each named curve of ``MEASURED`` (``memfit calibrate --json`` or ``--out``) is written into
``SHIPPED`` (``src/memfit/planner/data/<gpu>.json``), replacing one of the same name, and the
note is appended to its ``source``. Refused when the two are of different GPU types: a curve
of another GPU would be timed as this one's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("shipped", type=Path)
    parser.add_argument("measured", type=Path)
    parser.add_argument("curves", nargs="+")
    parser.add_argument("--note", required=True, help="appended to the source: what, when")
    args = parser.parse_args()
    shipped = json.loads(args.shipped.read_text())
    measured = json.loads(args.measured.read_text())
    if measured.get("key") != shipped["key"]:
        raise SystemExit(
            f"{args.measured} is a calibration of {measured.get('gpu')!r}, not of "
            f"{shipped['gpu']!r}: its curves are not this GPU's"
        )
    missing = [c for c in args.curves if c not in measured["curves"]]
    if missing:
        raise SystemExit(f"{args.measured} has no curve {', '.join(missing)}")
    for name in args.curves:
        shipped["curves"][name] = measured["curves"][name]
    shipped["source"] += f"; {args.note}"
    args.shipped.write_text(json.dumps(shipped, indent=1) + "\n")
    print(f"{len(args.curves)} curves into {args.shipped}: {shipped['source']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
