"""The command line's words as argparse should read them: a negative value is a value.

argparse takes ``-5`` after ``--gpu`` as its value, but not ``-5GiB`` or ``-1e3``: those look
like options to it, so ``--gpu -5GiB`` ended in "expected one argument", and the value never
reached the check that says what is wrong with it (a size is positive). Written
``--gpu=-5GiB``, it does. :func:`join_negative_values` writes every option's value that starts
with a minus and a number that way, so both spellings get the same paragraph.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["join_negative_values"]

_NEGATIVE = re.compile(r"-\.?[0-9]")  # -5GiB, -0.5, -.5, -1e3: a number, never an option


def join_negative_values(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` with ``--opt -5GiB`` written ``--opt=-5GiB`` wherever ``--opt`` takes one
    value. Words after ``--``, and a command's own arguments (``memfit run python train.py
    --lr -1e-3``: what follows the first positional word is the child's), are left alone."""
    commands = _commands(parser)
    takes_value = _value_options(parser)
    command: argparse.ArgumentParser | None = None
    joined: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or (command is not None and _passes_rest(command) and word[:1] != "-"):
            return joined + words[i:]
        if command is None and word in commands:
            command = commands[word]
            takes_value = _value_options(command)
        elif word in takes_value and i + 1 < len(words):
            value = words[i + 1]
            # the value, whatever it is, is not a word of its own (a command, the rest)
            negative = _NEGATIVE.match(value) and word.startswith("--")  # -b -3: argparse's
            joined += [f"{word}={value}"] if negative else [word, value]
            i += 2
            continue
        joined.append(word)
        i += 1
    return joined


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _value_options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of ``parser`` that take exactly one value."""
    return {
        text
        for action in parser._actions
        if action.option_strings and action.nargs is None
        for text in action.option_strings
    }


def _passes_rest(parser: argparse.ArgumentParser) -> bool:
    """Whether the command hands the words after its first positional one to another program
    (``memfit run``'s command)."""
    return any(
        not action.option_strings and action.nargs == argparse.REMAINDER
        for action in parser._actions
    )
