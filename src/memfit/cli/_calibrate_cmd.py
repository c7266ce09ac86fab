"""``memfit calibrate``: measure this machine's step-time rates for ``memfit plan``."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from memfit.cli._command import Command

__all__ = ["add_calibrate_parser", "run_calibrate"]


def add_calibrate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``calibrate`` on the subcommand parsers."""
    from memfit.planner.calibration import calibration_dir

    p = sub.add_parser(
        "calibrate",
        help="measure this machine's GPU and host rates, for memfit plan's step times",
        description="Measure, on this machine's GPU (a minute or two), the rates memfit "
        "plan's step-time model reads: matrix products, attention, convolutions, memory "
        "bandwidth and pinned copies (with --parts ...,host, how fast this host issues a "
        "step's ops too). The result is saved as this machine's calibration of "
        f"its GPU type (in {calibration_dir()}, or $MEMFIT_CALIBRATION_DIR), which plan then "
        "uses for that type (and for a --gpu given as a size); --out writes it elsewhere, to "
        "give plan with --calibration FILE.",
    )
    p.add_argument(
        "--parts",
        metavar="LIST",
        default="mm,mm_align,attn,mem,conv,pinned",
        help="what to measure, comma-separated: mm, mm_align, attn, mem, conv, pinned, host "
        "(default: all but host, the GPU's); the rest is kept from memfit's calibration. host "
        "scales memfit's cost of an op on the host by reference steps run here at a batch "
        "of one: on an H200 host it predicted full-size steps no better (docs/plan.md)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="two sizes of each convolution and one reference model for the host",
    )
    p.add_argument("--out", metavar="FILE", help="write the calibration here instead")
    p.add_argument(
        "--no-save", action="store_true", help="measure and print, write nothing (with --json)"
    )
    p.add_argument(
        "--list",
        dest="list_saved",
        action="store_true",
        help="list the calibrations saved on this machine (which plan uses for which GPU "
        "type) and measure nothing; needs no GPU",
    )
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")


def run_calibrate(args: argparse.Namespace, console: Console) -> int:
    from memfit._errors import InvalidInputError
    from memfit.planner.calibration import (
        calibrate,
        calibration_dir,
        save_calibration,
        saved,
        shipped,
    )

    if args.list_saved:
        rows = [_listed(d) for d in saved().values()]
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        from memfit.report import render_saved_calibrations

        render_saved_calibrations(rows, str(calibration_dir()), console)
        return 0

    if args.no_save and args.out:
        raise InvalidInputError(
            f"--no-save writes nothing, and --out {args.out} asks to write there: give one."
        )

    def progress(part: str) -> None:
        print(f"measured {part}", file=sys.stderr, flush=True)

    data = calibrate(args.parts, quick=args.quick, progress=progress)
    where = None if args.no_save else str(save_calibration(data, args.out))
    if args.json:
        print(json.dumps({**data, "written_to": where}, indent=1))
        return 0
    from memfit.report import render_calibration

    ours = shipped()
    render_calibration(data, ours.get(data["key"], ours["h200"]), where, console)
    return 0


def _listed(data: dict[str, object]) -> dict[str, object]:
    """What ``--list`` shows of a saved calibration."""
    return {k: data[k] for k in ("key", "gpu", "source", "path")}


COMMAND = Command("calibrate", add_calibrate_parser, run_calibrate)
