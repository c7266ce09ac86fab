"""Add to a calibration memfit ships: curves measured by ``memfit calibrate``, or
the memory-bound families' factors refitted from profiled steps.

    PYTHONPATH=src python benchmarks/calibration_add.py SHIPPED.json --curves MEASURED.json \
        CURVE [...] --note "attention with dropout 2026-12-03"
    PYTHONPATH=src python benchmarks/calibration_add.py SHIPPED.json --mem-factors PROFILE_DIR \
        --note "concatenations by CUDA's kernel 2026-12-03"

``--curves``: each named curve of ``MEASURED`` (``memfit calibrate --json`` or ``--out``) is
written into ``SHIPPED`` (``src/memfit/planner/data/<gpu>.json``), replacing one of the same
name. Refused when the two are of different GPU types: a curve of another GPU would be timed
as this one's. ``--mem-factors``: the factors are fitted again, as ``calibration_fit.py``
fits them, from ``op_profile.py``'s output (families the trace has split since get their
own). The note is appended to the calibration's ``source`` either way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_curves(shipped: dict[str, Any], measured_path: Path, curves: list[str]) -> None:
    measured = json.loads(measured_path.read_text())
    if measured.get("key") != shipped["key"]:
        raise SystemExit(
            f"{measured_path} is a calibration of {measured.get('gpu')!r}, not of "
            f"{shipped['gpu']!r}: its curves are not this GPU's"
        )
    missing = [c for c in curves if c not in measured["curves"]]
    if missing:
        raise SystemExit(f"{measured_path} has no curve {', '.join(missing)}")
    for name in curves:
        shipped["curves"][name] = measured["curves"][name]


def refit_mem_factors(shipped: dict[str, Any], profiles: Path) -> None:
    from calibration_fit import fit_mem_factors

    before = shipped["mem_factors"]
    after = fit_mem_factors(profiles, shipped)
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            print(f"  {key}: {before.get(key)} -> {after.get(key)}")
    shipped["mem_factors"] = after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("shipped", type=Path)
    parser.add_argument("--curves", nargs="+", metavar=("MEASURED", "CURVE"))
    parser.add_argument("--mem-factors", type=Path, metavar="PROFILE_DIR")
    parser.add_argument("--note", required=True, help="what changed and when, kept in 'changes'")
    args = parser.parse_args()
    if bool(args.curves) == bool(args.mem_factors):
        parser.error("give --curves MEASURED CURVE [...] or --mem-factors PROFILE_DIR")
    if args.curves and len(args.curves) < 2:
        parser.error("--curves takes the measured file, then the curves to add")
    shipped = json.loads(args.shipped.read_text())
    if args.curves:
        add_curves(shipped, Path(args.curves[0]), args.curves[1:])
    else:
        refit_mem_factors(shipped, args.mem_factors)
    # the source says what users read (where and when it was measured); the refits are listed
    shipped.setdefault("changes", []).append(args.note)
    args.shipped.write_text(json.dumps(shipped, indent=1) + "\n")
    print(f"{args.shipped}: {shipped['source']}; changes: {'; '.join(shipped['changes'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
