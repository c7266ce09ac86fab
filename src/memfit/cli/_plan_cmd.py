"""``memfit plan MODEL --gpu 24GiB``: the fastest training configuration that fits a budget.

Thin: the parser checks every value it can (the budget, the margin, the precisions, the global
batch) before anything is imported, :func:`memfit.planner.plan` searches, and
:mod:`memfit.report` renders. Progress goes to stderr, so that ``--json`` leaves stdout to the
JSON alone.

Exit codes: 0 a configuration fits, 1 nothing fits (after the nothing-fits answer or its JSON),
2 bad input or another error (:func:`memfit.cli.main` maps this command's errors to 2, since
1 is taken).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from memfit._choices import OPTIMIZERS, PRECISIONS
from memfit._errors import InvalidInputError
from memfit.cli._command import Command
from memfit.cli._help import a_number, positive_int, share
from memfit.cli._options import check_workload_flags
from memfit.cli._workload_args import add_workload_args
from memfit.technique import TECHNIQUES

if TYPE_CHECKING:
    from memfit._gpus import GPU

# the techniques that change what is trained, which a plan adds only where allowed
_ALLOWABLE = tuple(t.option.keyword for t in TECHNIQUES if t.kept_in_plans)

__all__ = ["add_plan_parser", "run_plan"]

ProgressFn = Callable[[int, int, str], None]


def budget(text: str) -> GPU:
    """``--gpu``: a GPU name or a memory size, checked as :func:`memfit.resolve_gpu` checks it
    (a unit is needed; at least the CUDA context, at most 2 TiB)."""
    from memfit._gpus import resolve_gpu

    try:  # a negative size is named as one there, as for memfit estimate --gpu
        return resolve_gpu(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def margin(text: str) -> float:
    """``--margin``: the share of the budget kept free, a fraction in [0, 1)."""
    value = a_number(
        text,
        "give the share of the budget to keep free as a fraction between 0 and 1, e.g. 0.05 for 5%",
    )
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is not a fraction between 0 and 1 (it is the share of the budget kept "
            "free); give e.g. 0.05 for 5%"
        )
    return value


def _names(text: str, accepted: tuple[str, ...], what: str, example: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of ``accepted``."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in accepted]
    if unknown or not names:
        given = ", ".join(repr(n) for n in unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(
            f"{given} is not {what} memfit plans for; give a comma-separated list of "
            f"{', '.join(accepted)}, e.g. {example}"
        )
    return names


def precisions(text: str) -> tuple[str, ...]:
    """``--precisions``: a comma-separated list of precision names."""
    return _names(text, PRECISIONS, "a precision", "fp32,bf16-mixed")


def optimizers(text: str) -> tuple[str, ...]:
    """``--optimizers``: a comma-separated list of optimizer names."""
    return _names(text, OPTIMIZERS, "an optimizer", "adamw-fused,adamw-in-backward")


def memory_budgets(text: str) -> tuple[float, ...]:
    """``--memory-budgets``: a comma-separated list of shares between 0 and 1."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    return tuple(share(part) for part in parts) if parts else (share(text),)  # "": refused


def add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``plan``; the workload flags ``estimate`` takes (the model, ``-b``, ``-s``,
    ``-p``...) here describe the user's own configuration."""
    p = sub.add_parser(
        "plan",
        help="find the fastest training configuration that fits a memory budget, on the CPU",
        description="Search, by estimation on the CPU, micro-batch size with gradient "
        "accumulation (keeping the global batch), precision, activation checkpointing, "
        "optimizer variant and allocator settings for the fastest training step that fits "
        "the budget. The workload flags (-b, -p, -o, --checkpointing...) describe your own "
        "configuration, the baseline. Sizes print in binary units (GiB). Exit code 0: a "
        "configuration fits; 1: nothing fits; 2: bad input or another error.",
    )
    add_workload_args(p)
    p.add_argument(
        "--gpu",
        "--budget",
        dest="budget",
        type=budget,
        default=None,  # None: refused with an example (run_plan), not argparse's one line
        metavar="GPU|SIZE",
        help="the memory to fit: a GPU (4090, a100-40g, h100, h200...) or a size such as "
        "24GiB; --budget is the same flag",
    )
    p.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        metavar="N",
        help="samples per optimizer step, kept by gradient accumulation (default: --batch-size)",
    )
    p.add_argument(
        "--margin",
        type=margin,
        default=None,
        metavar="F",
        help="share of the budget kept free, a fraction in [0, 1) (default: 0.05)",
    )
    p.add_argument(
        "--precisions",
        type=precisions,
        default=None,
        metavar="LIST",
        help="precisions to try, comma-separated: " + ",".join(PRECISIONS) + " (default: "
        "bf16-mixed, fp16-mixed on GPUs before Ampere, fp32, and -p's precision)",
    )
    p.add_argument(
        "--optimizers",
        type=optimizers,
        default=None,
        metavar="LIST",
        help="optimizer variants to try, comma-separated, e.g. adamw-fused,adamw-in-backward "
        "(default: your optimizer's fused, foreach, for-loop and in-backward variants; the "
        "first that steps after backward is the one the micro-batch search uses)",
    )
    p.add_argument(
        "--memory-budgets",
        type=memory_budgets,
        default=None,
        metavar="LIST",
        help="for a model compiled with torch.compile: the activation memory budgets to try in "
        "place of checkpointing, comma-separated shares, e.g. 1,0.5,0.25 (the default)",
    )
    p.add_argument(
        "--offloads",
        type=memory_budgets,
        default=None,
        metavar="LIST",
        help="activation offload shares to try beside fewer checkpointed blocks, "
        "comma-separated (default 1: every block not checkpointed; 0: no offload searched)",
    )
    p.add_argument(
        "--allow",
        nargs="+",
        choices=_ALLOWABLE,
        default=None,
        metavar="TECHNIQUE",
        help="techniques that change what is trained which the plan may add: "
        f"{', '.join(_ALLOWABLE)} (lora: rank-16 adapters, the base frozen; quantize: with "
        "lora, the base in nf4, QLoRA); default: none",
    )
    p.add_argument(
        "--no-checkpointing-search",
        action="store_true",
        help="keep your checkpointing setting instead of searching over none, selective, "
        "partial and full",
    )
    p.add_argument(
        "--no-cache-freeing",
        action="store_true",
        help="keep to configurations that fit with the allocator's cache kept (default: a "
        "faster one that runs in the budget by the allocator freeing its cache in its first "
        "steps only may be chosen)",
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="step-time rates from FILE (memfit calibrate --out FILE); default: this "
        "machine's calibration of the GPU type if memfit calibrate saved one, else memfit's",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes tracing candidates at once (default: the cores, at most 4)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="write memory against predicted step time of every candidate to FILE.png",
    )
    p.add_argument(
        "--all",
        dest="show_all",
        action="store_true",
        help="show every candidate in the table (default: the first 15)",
    )
    # "--gpu -3GiB": read the value as a (bad) value, not as a flag, so the error can name it
    p._negative_number_matcher = re.compile(r"^-\d")  # type: ignore[attr-defined]


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse what cannot be planned, before any work."""
    if not args.model:
        raise InvalidInputError(
            "Give a model, e.g. 'memfit plan gpt2 -b 8 -s 1024 --gpu 24GiB'; "
            "'memfit estimate --list-models' lists the catalog."
        )
    if args.budget is None:
        raise InvalidInputError(
            f"Give the memory to plan for: --gpu with a GPU (h100, a100-40g, 4090...) or a "
            f"size such as 24GiB, e.g. 'memfit plan {args.model} --gpu 24GiB'."
        )
    if args.mode != "train":
        raise InvalidInputError(
            f"--mode {args.mode}: memfit plan plans a training step (micro-batches, "
            "checkpointing and optimizer are what it changes). Drop --mode, or use memfit "
            "estimate --mode infer --gpu ... for inference."
        )
    check_workload_flags(args)
    if args.calibration is not None:
        from memfit.planner.calibration import read_calibration

        read_calibration(args.calibration)  # a missing or wrong file, before the search


def _plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`memfit.planner.plan`: the user's configuration and the
    search's settings that were given (the others keep the planner's defaults)."""
    from memfit.cli._options import workload_options

    options: dict[str, Any] = dict(workload_options(args))
    options.pop("mode", None)  # training only, checked above
    given = {
        "global_batch": args.global_batch,
        "margin": args.margin,
        "precisions": args.precisions,
        "optimizers": args.optimizers,
        "memory_budgets": args.memory_budgets,
        "offloads": args.offloads,
        "workers": args.workers,
        "calibration": args.calibration,
        "allow": args.allow,
    }
    options.update({k: v for k, v in given.items() if v is not None})
    if args.no_cache_freeing:
        options["cache_freeing"] = False
    if args.no_checkpointing_search:
        options["checkpointing"] = (options.get("activation_checkpointing") or False,)
    return options


@contextmanager
def _progress(err: Console) -> Iterator[ProgressFn]:
    """A progress callback on stderr: a bar in a terminal, a line a candidate otherwise. The
    planner may not know the total (``0``): the bar then only counts."""
    if not err.is_terminal:

        def line(done: int, total: int, what: str) -> None:
            count = f"{done}/{total}" if total > 0 else str(done)
            print(f"[{count}] {what}", file=sys.stderr, flush=True)

        yield line
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("Planning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total or None, description=what)

        yield update


def run_plan(args: argparse.Namespace, console: Console) -> int:
    import memfit.planner as planner
    from memfit.report import check_plot_path, render_plan, write_plan_png

    _check_flags(args)
    if args.plot is not None:  # before the search: a plot that cannot be written costs none
        check_plot_path(args.plot, (".png",), "plan plot")
    options = _plan_options(args)
    with _progress(Console(stderr=True)) as progress:
        # memfit.planner.plan looked up now, not imported by name: tests replace it
        result = planner.plan(args.model, budget=args.budget, progress=progress, **options)
    if args.json:
        print(result.to_json(), flush=True)
    else:
        render_plan(result, console, show_all=args.show_all)
    if args.plot is not None:
        try:
            written = write_plan_png(result, args.plot)
        except OSError as exc:
            raise InvalidInputError(
                f"The plan above is complete, but the plot could not be written to "
                f"'{args.plot}': {exc.strerror or exc}. Give a path you can write to."
            ) from exc
        if not args.json:
            console.print(f"Plot written to {written}", soft_wrap=True, highlight=False)
    return 0 if result.fits else 1


COMMAND = Command("plan", add_plan_parser, run_plan)
