"""What the parser needs beyond argparse: a help layout, examples, and checked number types.

Numbers are checked by the parser (``type=``) so that a bad ``-b`` or ``-s`` is refused before
any work starts (exit code 2, as for any flag argparse refuses), naming the value and the fix.
"""

from __future__ import annotations

import argparse

__all__ = [
    "EXAMPLES",
    "HelpFormatter",
    "a_number",
    "epilog",
    "positive_int",
    "share",
]

# Two or three real command lines per command, shown at the end of its --help.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "memfit": (
        "memfit estimate bert-base-uncased -b 8 -s 512 --gpu 24GiB",
        "memfit plan gpt2 -b 32 -s 1024 --gpu 24GiB",
        "memfit snapshot memory.pickle --capacity h100",
        "memfit watch --interval 0.5",
    ),
    "estimate": (
        "memfit estimate bert-base-uncased -b 8 -s 512 --gpu 24GiB",
        "memfit estimate gpt2 -b 4 -s 1024 -p bf16-mixed --plot memory.html",
        "memfit estimate gpt2 -s 1024 --gpu a100-40g --max-batch-size --margin 1GiB",
        "memfit estimate job.py:make_model -b 32  # make_model, make_batch, step",
    ),
    "plan": (
        "memfit plan gpt2 -b 32 -s 1024 --gpu 24GiB",
        "memfit plan bert-base-uncased -b 32 -s 512 --gpu 12GiB --global-batch 256 --json",
        "memfit plan gpt2 -b 16 -s 1024 --gpu a100-40g --precisions fp32,bf16-mixed "
        "--plot plan.png",
    ),
    "serve": (
        "memfit serve qwen2.5-7b --gpu h100 --context 8192",
        "memfit serve meta-llama-3-8b --gpu 80GB --concurrency 16 --new-tokens 512",
        "memfit serve tinyllama-1.1b --gpu 24GiB --context 4096 --table 1024 2048 --json",
    ),
    "calibrate": (
        "memfit calibrate",
        "memfit calibrate --quick --out a100.json  # then: memfit plan ... --calibration a100.json",
    ),
    "validate": (
        "memfit validate gpt2 -b 4 -s 1024",
        "memfit validate resnet50 -b 64 -p bf16-mixed --json",
    ),
    "snapshot": (
        "memfit snapshot memory.pickle",
        "memfit snapshot memory.pickle.gz --capacity 24GiB --html report.html",
    ),
    "run": (
        "memfit run -- python train.py --epochs 3",
        "memfit run --oom-dir oom-reports -- torchrun --nproc-per-node 2 train.py",
        "memfit run --limit 8GiB --growth -- python train_jax.py",
    ),
    "watch": (
        "memfit watch",
        "memfit watch --devices 0,1 --interval 0.5 --log gpu.csv",
        "memfit watch --once --json",
    ),
    "export": (
        "memfit export --port 9400",
        "memfit export --host 0.0.0.0 --interval 5",
    ),
    "doctor": (
        "memfit doctor",
        "memfit doctor --json",
    ),
}


def epilog(command: str) -> str:
    """The examples block of ``command``'s help, and where ``--debug`` goes."""
    lines = ["examples:", *(f"  {example}" for example in EXAMPLES[command])]
    lines.append("")
    lines.append("--debug, before or after the command, shows the traceback of an error.")
    if command == "memfit":
        lines.append("'memfit COMMAND --help' describes a command and its options.")
    return "\n".join(lines)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps one-line descriptions to the terminal, keeps text of several lines (the examples)
    as written, and adds ``(default: X)`` to options whose default is a value (not ``None`` or
    a switch that is off) and whose help does not already say it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and "default" not in text
            and default is not None
            and default is not False
            and default is not argparse.SUPPRESS
            and not isinstance(default, bool)
        ):
            text += " (default: %(default)s)"
        return text


def positive_int(text: str) -> int:
    """A whole number >= 1, as for ``--batch-size`` or ``--seq-len``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number; give a number >= 1, e.g. 8"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not accepted; give a number >= 1, e.g. 8")
    return value


def a_number(text: str, hint: str) -> float:
    """``text`` as a number; otherwise the parser's error, with ``hint`` (what to give)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; {hint}") from None


def share(text: str) -> float:
    """A share from 0 to 1, as for ``--activation-memory-budget``."""
    value = a_number(text, "give a share between 0 and 1, e.g. 0.5")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1; give e.g. 0.5")
    return value


def block_fraction(text: str) -> float:
    """A share of the blocks strictly between 0 and 1, as for ``--partial-checkpointing``."""
    value = a_number(
        text,
        "give the share of the blocks to checkpoint, between 0 and 1, e.g. 0.5 (or "
        "--checkpointing for all of them)",
    )
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"{value} is not between 0 and 1; give e.g. 0.5 for half the blocks, "
            "--checkpointing for all of them, or leave checkpointing off"
        )
    return value
