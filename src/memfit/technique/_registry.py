"""The techniques memfit knows, in one list: the step loop, the trace, the planner, the runtime
and the command line find each technique here and call its hooks (``_base.Technique``); none of
them names one. A new technique is a package beside the others and one line below."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique import (
    checkpointing,
    compilation,
    eight_bit,
    host_optimizer,
    in_backward,
    lora,
    offload,
    quantize,
)
from memfit.technique._base import Settings, Technique
from memfit.technique._variant import OptimizerVariant

__all__ = [
    "TECHNIQUES",
    "active_techniques",
    "checked_techniques",
    "optimizer_variant_of",
    "technique_aliases",
    "technique_named",
    "techniques_in",
    "with_aliases",
]

# in the order their hooks run: a compiled model's activation memory budget and checkpointing
# (each asked for by its own setting) first, as a script sets them once the model is built; the
# weights quantized before LoRA adapts them (QLoRA); the optimizer's variants (asked for by its
# name, ``adamw-in-backward``) after; activation offload (asked for by its own settings) last,
# around the blocks the others leave
TECHNIQUES: tuple[Technique, ...] = (
    compilation.TECHNIQUE,
    checkpointing.TECHNIQUE,
    host_optimizer.TECHNIQUE,
    quantize.TECHNIQUE,
    lora.TECHNIQUE,
    in_backward.TECHNIQUE,
    eight_bit.TECHNIQUE,
    offload.TECHNIQUE,
)


def optimizer_variant_of(name: object) -> OptimizerVariant | None:
    """The optimizer variant (in backward, 8-bit states) an optimizer's name asks for by its
    suffix, if any."""
    if not isinstance(name, str):
        return None
    for technique in TECHNIQUES:
        if isinstance(technique, OptimizerVariant) and name.endswith(technique.suffix):
            return technique
    return None


def technique_named(name: str) -> Technique:
    """The technique called ``name`` (its option's keyword)."""
    for technique in TECHNIQUES:
        if technique.option.keyword == name:
            return technique
    known = ", ".join(t.option.keyword for t in TECHNIQUES)
    raise InvalidInputError(
        f"techniques={{{name!r}: ...}} names no technique memfit knows; the techniques are {known}."
    )


def checked_techniques(given: object) -> tuple[tuple[str, Any], ...]:
    """``techniques=`` as given (a mapping of keyword to value), each value checked by its
    technique; those at their default left out, the rest sorted by name (a workload keeps them
    so: two workloads with the same techniques compare equal)."""
    if not isinstance(given, Mapping):
        raise InvalidInputError(
            f"techniques={given!r} is not a mapping: give them as a dict of name to value, "
            "e.g. techniques={'host_optimizer': True}."
        )
    out = []
    for name, value in given.items():
        technique = technique_named(str(name))
        checked = technique.check(value)
        if checked != technique.default:
            out.append((technique.option.keyword, checked))
    return tuple(sorted(out, key=lambda pair: pair[0]))


def technique_aliases() -> dict[str, str]:
    """Every alias keyword of the techniques, with the keyword it stands for."""
    return {a: t.option.keyword for t in TECHNIQUES for a in t.option.aliases}


def with_aliases(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each technique given by an alias (``peft_config=config``) moved into
    ``techniques`` (``{"lora": config}``); the same technique given both ways is refused."""
    aliases = technique_aliases()
    given = [a for a in aliases if options.get(a) is not None]
    if not given:
        return {k: v for k, v in options.items() if k not in aliases}
    out = {k: v for k, v in options.items() if k not in aliases}
    techniques = dict(out.get("techniques") or {})
    for alias in given:
        keyword = aliases[alias]
        if keyword in techniques:
            raise InvalidInputError(
                f"{alias}= and techniques={{{keyword!r}: ...}} both say how to use {keyword}: "
                "give one of them."
            )
        techniques[keyword] = options[alias]
    out["techniques"] = techniques
    return out


def active_techniques(settings: Settings) -> Iterator[tuple[Technique, Any]]:
    """Each technique a step's settings ask for, by ``techniques=`` or by another setting
    (``Technique.given_by``), with its value, in the registry's order."""
    given = dict(settings.techniques)
    for technique in TECHNIQUES:
        value = given.get(technique.option.keyword, technique.default)
        if value == technique.default:
            value = technique.given_by(settings)
        if value != technique.default:
            yield technique, value


def techniques_in(values: tuple[tuple[str, Any], ...]) -> Iterator[tuple[Technique, Any]]:
    """Each technique a workload asks for, with its value, in the registry's order."""
    given = dict(values)
    for technique in TECHNIQUES:
        if technique.option.keyword in given:
            yield technique, given[technique.option.keyword]
