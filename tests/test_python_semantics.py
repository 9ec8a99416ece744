"""Every form of the policy subset computes what CPython computes (SPEC Q1), differentially.

Hypothesis writes random programs in the subset: integer and boolean constants, the two
parameters, ``+ - * // %``, unary ``-`` and ``not``, chained comparisons, ``and``/``or`` (which
yield an operand, not a boolean), ``x if c else y``, ``min``/``max``; assignments, ``if``/
``elif``/``else`` with integer conditions, ``assert`` and ``return``. Each program runs in
CPython (compiled from the generated text: chunkproof's own test data, never a user's file) and
in the three forms of :mod:`chunkproof.model.subset` (the concrete interpreter, the vectorised
form over NumPy lanes, the Z3 form) and in the interpreter for code with loops and data
(:mod:`chunkproof.source.imperative`, which reads ``schedule()`` and the encoder code) over
Python scalars and NumPy lanes, on the same inputs, negative ones included. They must agree
on the value and on where the program raises (SPEC P0): a failed ``assert`` or a division by
zero. The search is derandomised, so CI runs the same programs every time.

Known answers beside it: the operand-returning ``and``/``or`` cases that once proved a
livelocking policy (``(T - 4099) or 7``), booleans in arithmetic, and a value no lane-wise form
can hold (``n or "s"``), which is refused with one line.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from cli_helpers import Cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_copies import copy_release

from chunkproof.model.concrete import ScalarDomain
from chunkproof.model.concrete import run as concrete
from chunkproof.model.errors import SubsetError
from chunkproof.model.subset import SubsetFunction, validate
from chunkproof.model.symbolic import symbolic
from chunkproof.model.vectorised import NumpyDomain, evaluate
from chunkproof.source import imperative
from chunkproof.source.extraction import SCHEDULER_FILE

INPUTS = [(a, b) for a in range(-5, 6) for b in range(-5, 6)]
"""Every program runs on these (a, b): both signs, zero, and equal pairs."""

INTERPRETER_INPUTS = INPUTS[::4]
"""The concrete interpreter runs once per point, so at a sample (the vectorised form covers
every point in one call)."""

SOLVER_INPUTS = INPUTS[::9]
"""The Z3 form is evaluated at these (each point is a substitution and a simplification)."""

_OPERATORS = ["+", "-", "*", "//", "%"]
_COMPARISONS = ["<", "<=", ">", ">=", "==", "!="]


def _expressions(names: list[str]) -> st.SearchStrategy[str]:
    """Expressions of the subset over ``names`` and small constants."""
    leaves = st.one_of(
        st.sampled_from([*names, "True", "False"]),
        st.integers(-3, 3).map(lambda v: f"({v})"),
    )

    def compound(sub: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(sub, st.sampled_from(_OPERATORS), sub).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(sub, st.sampled_from(["and", "or"]), sub).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(
                sub, st.sampled_from(_COMPARISONS), sub, st.sampled_from(_COMPARISONS), sub
            ).map(lambda t: f"({t[0]} {t[1]} {t[2]} {t[3]} {t[4]})"),
            sub.map(lambda e: f"(not {e})"),
            sub.map(lambda e: f"(-{e})"),
            st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(sub, min_size=2, max_size=3)).map(
                lambda t: f"{t[0]}({', '.join(t[1])})"
            ),
        )

    return st.recursive(leaves, compound, max_leaves=10)


FIRST = _expressions(["a", "b"])
EXPRESSIONS = _expressions(["a", "b", "x"])


@st.composite
def programs(draw: st.DrawFn) -> str:
    """A function ``f(a, b)`` of the subset: a local, an ``if``/``elif``/``else`` on integer
    conditions (each branch assigns, may assert and may return), and a final ``return``."""

    def e() -> str:
        return draw(EXPRESSIONS)

    lines = ["def f(a, b):", f"    x = {draw(FIRST)}"]
    keyword = "if"
    for _ in range(draw(st.integers(1, 3))):
        lines.append(f"    {keyword} {e()}:")
        lines.append(f"        x = {e()}")
        if draw(st.booleans()):
            lines.append(f"        assert {e()}")
        if draw(st.booleans()):
            lines.append(f"        return {e()}")
        keyword = "elif"
    if draw(st.booleans()):
        lines += ["    else:", f"        x = {e()}"]
    lines.append(f"    return {e()}")
    return "\n".join(lines) + "\n"


def _subset_function(text: str) -> SubsetFunction:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.FunctionDef)
    func = SubsetFunction(node.name, node, "<generated>", {})
    validate(func)
    return func


def _cpython(text: str) -> dict[tuple[int, int], tuple[bool, int | None]]:
    """(raised, value) of the program run by CPython at each of :data:`INPUTS`."""
    scope: dict[str, Any] = {}
    exec(compile(text, "<generated>", "exec"), scope)  # the test's own generated program
    results: dict[tuple[int, int], tuple[bool, int | None]] = {}
    for a, b in INPUTS:
        try:
            results[a, b] = (False, int(scope["f"](a, b)))
        except (ZeroDivisionError, AssertionError):
            results[a, b] = (True, None)
    return results


def _solver_value(term: Any, a: z3.ArithRef, b: z3.ArithRef, point: tuple[int, int]) -> Any:
    """A Z3 term (or a Python constant) at one point, as a Python int or bool."""
    if not isinstance(term, z3.ExprRef):
        return term
    value = z3.simplify(z3.substitute(term, (a, z3.IntVal(point[0])), (b, z3.IntVal(point[1]))))
    if z3.is_true(value) or z3.is_false(value):
        return z3.is_true(value)
    return value.as_long()


def _agree(text: str) -> None:
    """The three forms of ``text`` agree with CPython on :data:`INPUTS` (value and crash)."""
    func = _subset_function(text)
    expected = _cpython(text)
    for p in INTERPRETER_INPUTS:
        raised, value = expected[p]
        outcome = concrete(func, list(p))
        assert (outcome.crashed, outcome.value) == (raised, value), (text, p, "concrete")

    a_lanes = np.array([p[0] for p in INPUTS])
    b_lanes = np.array([p[1] for p in INPUTS])
    lanes = evaluate(func, [a_lanes, b_lanes])
    values = np.broadcast_to(lanes.value, a_lanes.shape)
    crashed = np.broadcast_to(lanes.crashed, a_lanes.shape)
    for i, p in enumerate(INPUTS):
        raised, value = expected[p]
        assert bool(crashed[i]) == raised, (text, p, "vectorised crash")
        if not raised:
            assert int(values[i]) == value, (text, p, "vectorised")

    for p in INTERPRETER_INPUTS:
        raised, value = expected[p]
        scalar = ScalarDomain()
        result = imperative.run(scalar, func, list(p))
        assert scalar.crashed == raised, (text, p, "imperative crash")
        if not raised:
            assert result == value, (text, p, "imperative")
    numpy = NumpyDomain()
    result = np.broadcast_to(imperative.run(numpy, func, [a_lanes, b_lanes]), a_lanes.shape)
    crashed = np.broadcast_to(numpy.crashed, a_lanes.shape)
    for i, p in enumerate(INPUTS):
        raised, value = expected[p]
        assert bool(crashed[i]) == raised, (text, p, "imperative lanes crash")
        if not raised:
            assert int(result[i]) == value, (text, p, "imperative lanes")

    a, b = z3.Ints("a b")
    term, crash = symbolic(func, [a, b])
    for p in SOLVER_INPUTS:
        raised, value = expected[p]
        assert _solver_value(crash, a, b, p) is raised, (text, p, "z3 crash")
        if not raised:
            assert _solver_value(term, a, b, p) == value, (text, p, "z3")


@pytest.mark.slow
@settings(
    max_examples=3000,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs())
def test_every_form_computes_what_cpython_computes(text: str) -> None:
    _agree(text)


@pytest.mark.parametrize(
    "body",
    [
        # The operand of `or`, not a boolean: a livelock the forms once proved live.
        "k = (a - 3) or 7\n    if k == 7:\n        return 0\n    return 1",
        "return (a - 3) or (a - 4)",
        "return (a == 3) and 2",
        "return a or True",
        "return (a > 0) + (b > 0) + True",
        "return -(a > b)",
        "return min(a > 0, b) + max(True, b)",
        "return (a and b) * 10 + (a or b)",
        "return not (a or b - b)",
        "return (a if a > b else b > 0) * 3",
        "return ((a > 0) == 1) + ((a > 0) == (b > 0))",
        "assert a or b\n    return 1",
        "if a and b % 2:\n        return a // b\n    return b or 9",
    ],
)
def test_known_answers(body: str) -> None:
    _agree(f"def f(a, b):\n    {body}\n")


@pytest.mark.parametrize(
    "body",
    [
        'return (a or "s") == "s"',
        'x = a or "s"\n    return 1 if x == "s" else 0',
    ],
)
def test_a_value_no_form_can_hold_is_refused_with_one_line(body: str) -> None:
    """``a or "s"`` is a string on some lanes and a number on others: refused where it is
    read, naming the line (SPEC Q1), in the forms that evaluate lane-wise."""
    text = f"def f(a, b):\n    {body}\n"
    func = _subset_function(text)
    with pytest.raises(SubsetError, match="<generated>:2"):
        evaluate(func, [np.array([0, 1]), np.array([0, 0])])
    with pytest.raises(SubsetError, match="<generated>:2"):
        symbolic(func, list(z3.Ints("a b")))


# --- the false PROVED of operand-returning and/or, on a real release's split -----------------

_STUCK_AT_4099 = [
    "if ((request.num_tokens - 4099) or 7) == 7:",
    "if ((request.num_tokens - 4099) or True) == 1:",
    "if ((request.num_tokens - 4092) or 7) == 7:",
    "if ((request.num_tokens == 4099) and 2) == 2:",
    "if ((request.num_tokens - 4099) or (request.num_tokens - 4000)) == 99:",
]
"""Guards a pull request could add at the top of 0.33.0's split (then ``return 0``): each holds
for T = 4099 (the third for T = 4092 and 4099), so CPython never schedules that prompt."""


def _guarded_split(guard: str, into: Path) -> Path:
    """0.33.0's tree with ``guard: return 0`` as the first statement of its split."""
    root = copy_release("0.33.0", into, with_manifest=True)
    scheduler = root / SCHEDULER_FILE
    lines = scheduler.read_text().splitlines(keepends=True)
    tree = ast.parse("".join(lines))
    split = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "_mamba_block_aligned_split"
    )
    first = split.body[1]  # after the docstring
    lines.insert(first.lineno - 1, f"        {guard}\n            return 0\n")
    scheduler.write_text("".join(lines))
    return root


@pytest.mark.fidelity
@pytest.mark.parametrize("guard", _STUCK_AT_4099)
def test_a_guard_on_an_operand_of_or_is_a_livelock_in_every_engine(
    guard: str, cli: Cli, tmp_path: Path
) -> None:
    """The explorer and the prover both find the request CPython never schedules (SPEC Q1);
    they once read ``x or 7`` as a boolean and proved P1."""
    root = _guarded_split(guard, tmp_path / "tree")
    stuck = cli(
        "trace",
        str(root),
        "--block",
        "16",
        "--lookahead",
        "0",
        "--prompt",
        "4099",
        "--budget",
        "16",
        "--json",
    )
    assert stuck.json()["outcome"] == "stuck"
    out = str(tmp_path / "out")
    explored = cli(
        "explore",
        str(root),
        "--block",
        "16",
        "--lookahead",
        "0",
        "--drop",
        "off",
        "--prompt",
        "4090-4100",
        "--max-sched",
        "16",
        "--property",
        "P1",
        "--out",
        out,
    )
    assert explored.code == 1 and "P1 LIVE             VIOLATED" in explored.out, explored.out
    proved = cli(
        "prove",
        str(root),
        "--block",
        "16",
        "--lookahead",
        "0",
        "--drop",
        "off",
        "--property",
        "P1",
        "--out",
        out,
    )
    assert proved.code == 1 and "P1 LIVE             VIOLATED" in proved.out, proved.out


@pytest.mark.parametrize("returned", ['"abc"', "None"])
def test_a_split_returning_a_non_integer_on_some_lanes_is_one_line(
    returned: str, cli: Cli, tmp_path: Path
) -> None:
    """A split that returns a string or None at one state: every engine refuses it with one
    line naming the line (once a Z3 ``parser error`` traceback, and a PROVED for None)."""
    policy = tmp_path / "policy.py"
    policy.write_text(
        f"def split(cfg, c, n):\n    if c == 4:\n        return {returned}\n    return n\n"
    )
    for command in (["prove"], ["explore", "--prompt", "1-20", "--max-sched", "1-8"]):
        run = cli(
            *command,
            f"{policy}:split",
            "--block",
            "4",
            "--lookahead",
            "0",
            "--out",
            str(tmp_path / "out"),
        )
        assert run.code == 2 and not run.out, run
        assert run.err.count("\n") == 1 and f"{policy}:4: split returns an integer" in run.err


def test_a_helper_that_raises_on_every_lane_is_a_crash_of_its_caller(
    cli: Cli, tmp_path: Path
) -> None:
    """A helper whose every live lane fails an assert leaves its caller on those lanes a
    crash (SPEC P0), not a computation on a missing value."""
    policy = tmp_path / "policy.py"
    policy.write_text(
        "def h(c):\n    assert c > 4\n    return c\n\n\n"
        "def split(cfg, c, n):\n    return h(c) + n - c\n"
    )
    traced = cli(
        "trace",
        f"{policy}:split",
        "--block",
        "4",
        "--lookahead",
        "0",
        "--prompt",
        "12",
        "--budget",
        "4",
        "--json",
    )
    assert traced.json()["unsafe"] is not None, traced
    explored = cli(
        "explore",
        f"{policy}:split",
        "--block",
        "4",
        "--lookahead",
        "0",
        "--prompt",
        "1-12",
        "--max-sched",
        "1-4",
        "--property",
        "P0",
        "--out",
        str(tmp_path / "out"),
    )
    assert explored.code == 1 and "P0 SAFE             VIOLATED" in explored.out, explored.out
