"""The registry of techniques: techniques= checked and kept in one order, an unknown name or a
value of the wrong kind refused with the names there are, a flag for each on the command line,
and no technique named by the code that calls their hooks."""

from __future__ import annotations

import pathlib
import re

import pytest

import memfit
from memfit import InvalidInputError
from memfit.technique import TECHNIQUES, checked_techniques

SRC = pathlib.Path(memfit.__file__).parent


def test_techniques_are_checked_sorted_and_defaults_left_out() -> None:
    assert checked_techniques({"host_optimizer": True}) == (("host_optimizer", True),)
    assert checked_techniques({"host_optimizer": False}) == ()


def test_an_unknown_technique_is_refused_with_those_there_are() -> None:
    with pytest.raises(InvalidInputError, match="'offload_everything'") as err:
        checked_techniques({"offload_everything": True})
    assert "host_optimizer" in str(err.value)


def test_techniques_must_be_a_mapping() -> None:
    with pytest.raises(InvalidInputError, match="is not a mapping"):
        checked_techniques(["host_optimizer"])


def test_a_workload_keeps_its_techniques() -> None:
    from torch import nn

    from memfit.workload import make_workload

    w = make_workload(
        nn.Linear(4, 4),
        lambda: __import__("torch").randn(2, 4),
        techniques={"host_optimizer": True},
    )
    assert w.techniques == (("host_optimizer", True),)


def test_every_technique_has_a_flag_that_reaches_the_workload() -> None:
    from memfit.cli._options import workload_options
    from memfit.cli._parser import make_parser

    parser = make_parser()
    for technique in TECHNIQUES:
        if not technique.option.flag:  # asked for by another setting (an optimizer's name)
            continue
        flag = [technique.option.flag]
        value: object = True
        if technique.option.kind is not bool:  # a value of its kind
            value = technique.option.kind(16)
            flag.append(str(value))
        args = parser.parse_args(["estimate", "gpt2", "-b", "2", "-s", "8", *flag])
        options = workload_options(args)
        assert options["techniques"] == {technique.option.keyword: value}


# the callers that still name a technique: activation offload's axis in the planner's search, the
# plan's fields it is read from and its flags are not its hooks yet (its wrapping of the blocks,
# the trace's observer of its copies, its refusal of compiled models and its change of a live
# model are); checkpointing's levels are the planner's own axis, which its search and the
# plan's fields name, beside its flags (its wrapping of the blocks, its checks and its change
# of a live model are its hooks); so is a compiled model's activation memory budget, whose
# values the plan checks before memfit.apply (its checks and live change are its hooks)
PLANNER = {p.name for p in (SRC / "planner").rglob("*.py")}
STILL_NAMED: dict[str, set[str]] = {
    "memory_budget": PLANNER | {"_apply.py"},
    "checkpointing": PLANNER | {"_apply.py", "_workload_args.py", "_options.py"},
    "offload": {
        "__init__.py",
        "_calibrate.py",
        "_gpu_rates.py",
        "_offload_search.py",
        "_plan.py",
        "_plan_checks.py",
        "_plan_result.py",
        "_search.py",
        "_step_time.py",
        "_technique_search.py",
        "_would_fit.py",
        "_apply.py",
        "_workload_args.py",
    },
}


def test_the_optimizers_variants_are_techniques_by_its_name() -> None:
    from torch import nn

    from memfit.technique import active_techniques
    from memfit.workload import make_workload

    stepped = make_workload(
        nn.Linear(4, 4), lambda: __import__("torch").randn(2, 4), optimizer="adamw-in-backward"
    )
    assert [(t.name, v) for t, v in active_techniques(stepped)] == [
        ("in_backward", "adamw-in-backward")
    ]
    with pytest.raises(InvalidInputError, match="optimizer='adamw-in-backward'"):
        make_workload(
            nn.Linear(4, 4),
            lambda: __import__("torch").randn(2, 4),
            techniques={"in_backward": True},
        )
    with pytest.raises(InvalidInputError, match="cannot add up over accumulation=2"):
        make_workload(
            nn.Linear(4, 4),
            lambda: __import__("torch").randn(2, 4),
            optimizer="adamw-in-backward",
            accumulation=2,
        )


def test_the_callers_of_the_hooks_name_no_technique() -> None:
    planner = sorted((SRC / "planner").rglob("*.py"))  # every module of the planner
    assert SRC / "planner" / "_technique_search.py" in planner
    callers = [
        SRC / "workload" / "_step.py",
        SRC / "trace" / "_tracer.py",
        SRC / "trace" / "_trace_notes.py",
        *planner,
        SRC / "runtime" / "_changes.py",
        SRC / "runtime" / "_apply.py",
        SRC / "runtime" / "_planned_step.py",
        SRC / "cli" / "_workload_args.py",
        SRC / "cli" / "_options.py",
    ]
    for technique in TECHNIQUES:
        for path in callers:
            if path.name in STILL_NAMED.get(technique.name, ()):
                continue
            named = re.search(rf"\b{technique.option.keyword}\b", path.read_text())
            assert named is None, (path, technique.option.keyword)
