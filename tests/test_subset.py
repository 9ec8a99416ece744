"""The policy subset (:mod:`chunkproof.model.subset`): one syntax tree, three forms, Python's
semantics.

* The interpreted forms of chunkproof's own stage functions (the concrete form over Python
  integers, :mod:`chunkproof.model.concrete`; the vectorised form over NumPy lanes,
  :func:`chunkproof.model.vectorised.evaluate`; the symbolic form over Z3 terms,
  :func:`chunkproof.model.symbolic.symbolic`) equal the functions run natively, crashes
  included (SPEC P0), on random inputs.
* Crashes: a failed ``assert``, a ``raise`` or a division by zero crashes exactly the live
  lanes on which Python would raise; ``and``/``or`` and ``x if c else y`` evaluate an operand
  only on the lanes Python evaluates it on.
* Members of a stand-in (:class:`~chunkproof.model.subset.SourceObject`: methods, properties,
  static methods) are interpreted from their syntax trees; nothing read from a file is
  compiled or executed.
* Constructs outside the subset are a one-line :class:`~chunkproof.model.errors.SubsetError`
  naming file and line; user files are read with
  :func:`~chunkproof.source.functions.read_function`, never imported.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import z3
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chunkproof.model import acceptance, splits, stages
from chunkproof.model.concrete import run as concrete
from chunkproof.model.config import Config
from chunkproof.model.errors import MAX_BITS, ConfigError, SubsetError, ValueTooLarge
from chunkproof.model.step import step_view
from chunkproof.model.subset import parse
from chunkproof.model.symbolic import symbolic
from chunkproof.model.vectorised import evaluate
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.functions import read_function
from chunkproof.source.methods import load_scheduler, standins

StageFunction = Callable[[Any, int, int], int]

STAGES: list[StageFunction] = [
    splits.split_v1,
    splits.split_v2,
    splits.split_v2b,
    splits.split_v3,
    splits.split_v4,
    splits.split_v5,
    splits.split_v6,
    splits.split_v7,
    splits.split_v8,
    splits.split_v9,
    splits.split_keep_subblock,
    splits.split_keep_subblock_v5,
    splits.split_keep_subblock_realign,
    splits.split_lookahead_in_split,
    stages.cap_static_threshold,
    stages.cap_lone_request,
    stages.reserve_r1,
    stages.reserve_unaligned,
]
"""Every stage of the built-in policies (SPEC V) that reads no encoder items. The encoder
stages and ``split_keep_subblock_encoder_only`` read them: their vectorised form is checked
against the native one by tests/test_explorer_bruteforce.py (random configurations with items)
and against the real encoder methods by tests/test_encoder_fidelity.py."""
PREDICATES: list[Callable[[Any], bool]] = [rule.holds for rule in acceptance.RULES]
"""The acceptance rules (SPEC S1b), which the explorer and the prover evaluate too."""
CRASHES = (AssertionError, ArithmeticError)
BOOL_FIELDS = ("drop", "exact_junction", "partial_hits", "checkpoints")
CELL_FIELDS = ("block", "split_block", "hash_block", "sched_block", "checkpoint_alignment")
"""What a proof cell keeps concrete (with R and the lookahead class)."""


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Well-formed configurations over every input of Config, small enough to enumerate."""
    block = draw(st.sampled_from([1, 2, 4, 8, 16, 48]))
    split_block = draw(st.sampled_from([block, block, block // 2 or 1, block // 4 or 1, 2 * block]))
    common = [d for d in (1, 2, 4, 8, 16, 48) if block % d == 0 and split_block % d == 0]
    prompt = draw(st.integers(1, 120))
    tokens = prompt + draw(st.sampled_from([0, 0, 1, 3, 17]))
    start = draw(st.integers(0, max(prompt, tokens - 1) - 1))
    fields: dict[str, Any] = {
        "block": block,
        "split_block": split_block,
        "hash_block": draw(st.sampled_from([0, *common])),
        "prompt": prompt,
        "tokens": tokens,
        "max_sched": draw(st.integers(1, 64)),
        "lookahead": draw(st.integers(0, 6)),
        "threshold": draw(st.sampled_from([0, 0, 3, 16])),
        "drop": draw(st.booleans()),
        "hash_lookahead": draw(st.sampled_from([0, 1, 3])),
        "start": start,
        "external": draw(st.sampled_from([0, 0, start, start // 2])),
        "junction": draw(st.integers(0, tokens)),
        "exact_junction": draw(st.booleans()),
        "partial_hits": draw(st.sampled_from([None, True, False])),
        "checkpoints": draw(st.booleans()),
        "checkpoint_alignment": draw(st.sampled_from([0, 1, 8])),
        "uncached_prefix": draw(st.sampled_from([0, 20, 64])),
        "retention": draw(st.sampled_from([-1, 0, 32])),
    }
    if draw(st.booleans()):
        fields["sched_block"] = block * split_block * draw(st.sampled_from([1, 2]))
    try:
        return Config(**fields)
    except ConfigError:
        assume(False)
        raise


def native(function: StageFunction, cfg: Any, c: int, n: int) -> int | None:
    """The function run by Python; ``None`` when it raises as a policy crashes (SPEC P0)."""
    try:
        return function(cfg, c, n)
    except CRASHES:
        return None


# --- the three forms equal native Python ----------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(cfg=configs(), c=st.integers(0, 140), n=st.integers(0, 80))
def test_concrete_form_equals_native(cfg: Config, c: int, n: int) -> None:
    for function in STAGES:
        outcome = concrete(parse(function), [cfg, c, n])
        expected = native(function, cfg, c, n)
        assert outcome.crashed == (expected is None), function.__name__
        if expected is not None:
            assert outcome.value == expected and type(outcome.value) is int, function.__name__
        else:
            assert outcome.where is not None and "assertion failed" in outcome.where
    for predicate in PREDICATES:
        assert concrete(parse(predicate), [cfg]).value == predicate(cfg), predicate.__name__


def lanes(cfgs: list[Config], cs: list[int], ns: list[int]) -> tuple[SimpleNamespace, Any, Any]:
    """Every (config, c, n) as one lane: the fields as int64 arrays where they differ and
    plain values where all lanes agree (as the explorer batches them), c and n as arrays."""
    grid = [(cfg, c, n) for cfg in cfgs for c in cs for n in ns]
    fields: dict[str, Any] = {}
    for name in cfgs[0].to_dict():
        values = [getattr(cfg, name) for cfg, _, _ in grid]
        same = all(v == values[0] for v in values)
        fields[name] = values[0] if same else np.asarray(values, dtype=np.int64)
    c = np.asarray([c for _, c, _ in grid], dtype=np.int64)
    n = np.asarray([n for _, _, n in grid], dtype=np.int64)
    return SimpleNamespace(**fields), c, n


@settings(max_examples=40, deadline=None)
@given(cfgs=st.lists(configs(), min_size=1, max_size=3))
def test_vectorised_form_equals_native_lane_by_lane(cfgs: list[Config]) -> None:
    """One evaluation over lanes that differ in the configuration, c and n; every lane equals
    the native call, and exactly the lanes where Python raises are marked crashed."""
    top = max(cfg.tokens for cfg in cfgs) + 2
    cs, ns = list(range(0, top, 3)), [0, 1, 2, 5, 8, 15, 16, 17, 31, 48]
    view, c, n = lanes(cfgs, cs, ns)
    grid = [(cfg, cv, nv) for cfg in cfgs for cv in cs for nv in ns]
    for function in STAGES:
        outcome = evaluate(parse(function), [view, c, n])
        values = np.broadcast_to(outcome.value, c.shape)
        crashed = np.broadcast_to(outcome.crashed, c.shape)
        for i, (cfg, cv, nv) in enumerate(grid):
            expected = native(function, cfg, cv, nv)
            assert bool(crashed[i]) == (expected is None), (function.__name__, cfg, cv, nv)
            if expected is not None:
                assert values[i] == expected, (function.__name__, cfg.describe(), cv, nv)
    for predicate in PREDICATES:
        held = np.broadcast_to(evaluate(parse(predicate), [view]).value, c.shape)
        assert [bool(h) for h in held] == [predicate(cfg) for cfg, _, _ in grid]


def symbolic_view(cfg: Config) -> tuple[SimpleNamespace, dict[str, Any]]:
    """``cfg`` as a proof cell sees it: B, G, H, B_s, alpha and R concrete, every other field
    a Z3 constant; and the substitution that gives them ``cfg``'s values."""
    fields: dict[str, Any] = {}
    values: list[tuple[Any, Any]] = []
    for name, value in cfg.to_dict().items():
        if name == "items":
            continue  # the encoder items: no stage tested here reads them
        if name in CELL_FIELDS or name == "retention":
            fields[name] = value
        elif name in BOOL_FIELDS:
            fields[name] = z3.Bool(name)
            values.append((fields[name], z3.BoolVal(bool(value))))
        else:
            fields[name] = z3.Int(name)
            values.append((fields[name], z3.IntVal(value)))
    return SimpleNamespace(**fields), {"pairs": values}


def at(term: Any, pairs: list[tuple[Any, Any]]) -> Any:
    """A term's value (a Python int or bool) once every constant is substituted."""
    if not isinstance(term, z3.ExprRef):
        return term
    value = z3.simplify(z3.substitute(term, *pairs)) if pairs else z3.simplify(term)
    if z3.is_true(value) or z3.is_false(value):
        return z3.is_true(value)
    return value.as_long()


@settings(max_examples=25, deadline=None)
@given(
    cfg=configs(),
    points=st.lists(st.tuples(st.integers(0, 140), st.integers(0, 80)), min_size=4, max_size=8),
)
def test_symbolic_form_equals_native(cfg: Config, points: list[tuple[int, int]]) -> None:
    """One translation per function with c, n and every non-cell field symbolic; substituting
    values gives the native result, and the crash condition holds exactly where Python
    raises."""
    view, subst = symbolic_view(cfg)
    c, n = z3.Ints("c n")
    for function in STAGES:
        term, crash = symbolic(parse(function), [view, c, n])
        for cv, nv in points:
            pairs = [*subst["pairs"], (c, z3.IntVal(cv)), (n, z3.IntVal(nv))]
            expected = native(function, cfg, cv, nv)
            assert at(crash, pairs) is (expected is None), (function.__name__, cv, nv)
            if expected is not None:
                assert at(term, pairs) == expected, (function.__name__, cfg.describe(), cv, nv)
    for predicate in PREDICATES:
        term, _ = symbolic(parse(predicate), [view])
        assert at(term, subst["pairs"]) == predicate(cfg), predicate.__name__


def truthy_split(cfg: Config, c: int, n: int) -> int:
    """Integers as conditions, as vLLM's code writes them (``if end % block_size:``)."""
    if (c + n) % cfg.block and not c % cfg.block:
        return n - (c + n) % cfg.block
    return n if c or n else 0


def floors(c: int, n: int) -> int:
    """Python's floor division and modulo for every sign of both operands."""
    return (c // n) * 1000 + c % n if n else c - n


@pytest.mark.parametrize("function", [truthy_split, floors])
def test_python_semantics_in_every_form(function: StageFunction) -> None:
    """Integer truthiness and floor division/modulo with negative operands, in all forms."""
    cfg = Config(block=4, prompt=20, max_sched=8)
    points = [(c, n) for c in range(-9, 10) for n in range(-5, 6)]

    def call(c: Any, n: Any) -> list[Any]:
        return [cfg, c, n] if function is truthy_split else [c, n]

    tree = parse(function)
    cs = np.array([c for c, _ in points])
    ns = np.array([n for _, n in points])
    vectorised = np.broadcast_to(evaluate(tree, call(cs, ns)).value, cs.shape)
    c, n = z3.Ints("c n")
    term, crash = symbolic(tree, call(c, n))
    for i, (cv, nv) in enumerate(points):
        expected = function(*call(cv, nv))
        assert concrete(tree, call(cv, nv)).value == expected
        assert vectorised[i] == expected
        assert at(term, [(c, z3.IntVal(cv)), (n, z3.IntVal(nv))]) == expected
        assert at(crash, [(c, z3.IntVal(cv)), (n, z3.IntVal(nv))]) is False


# --- crashes ---------------------------------------------------------------------------------
# Each function below is run natively and in the three forms; `undefined_name` in a `raise` is
# never evaluated (the subset does not evaluate exception expressions).


def asserts(c: int, n: int) -> int:
    assert n > 0
    return c // n


def raises(c: int, n: int) -> int:
    if n < 0:
        raise ValueError(undefined_name)  # type: ignore[name-defined]  # noqa: F821
    return n


def divides(c: int, n: int) -> int:
    return c // n + c % (n + 1)


def divides_on_live_lanes_only(c: int, n: int) -> int:
    if n == 0:
        return -1
    return c // n


def guarded_and(c: int, n: int) -> int:
    if n != 0 and c // n > 1:
        return 1
    return 0


def guarded_or(c: int, n: int) -> int:
    if n == 0 or c % n == 0:
        return 1
    return 0


def guarded_if_expression(c: int, n: int) -> int:
    return c // n if n else c % (n + 2)


def unguarded_and(c: int, n: int) -> int:
    if c // n > 1 and n != 0:
        return 1
    return 0


def chained_comparison(c: int, n: int) -> int:
    if n != 0 < c // n < 10:
        return 1
    return 0


def stops_at_the_first_crash(c: int, n: int) -> int:
    assert n != 0
    return c // n


def crash_after_return(c: int, n: int) -> int:
    if n <= 0:
        return 0
    assert c // n >= 0
    return 1


def generator_filter(c: int, n: int) -> int:
    return min((c // s for s in (n, n - 1, 2) if s != 0), default=-7)


CRASH_FUNCTIONS = [
    asserts,
    raises,
    divides,
    divides_on_live_lanes_only,
    guarded_and,
    guarded_or,
    guarded_if_expression,
    unguarded_and,
    chained_comparison,
    stops_at_the_first_crash,
    crash_after_return,
    generator_filter,
]


def python(function: Callable[[int, int], int], c: int, n: int) -> int | None:
    try:
        return function(c, n)
    except (AssertionError, ArithmeticError, ValueError, NameError):
        return None


@pytest.mark.parametrize("function", CRASH_FUNCTIONS, ids=lambda f: f.__name__)
def test_crashes_exactly_where_python_raises(function: Callable[[int, int], int]) -> None:
    """Concrete, vectorised (one evaluation over every point) and symbolic forms crash on
    exactly the (c, n) where Python raises, and equal it elsewhere."""
    tree = parse(function)
    points = [(c, n) for c in range(-7, 8) for n in range(-3, 4)]
    cs = np.array([c for c, _ in points])
    ns = np.array([n for _, n in points])
    lanewise = evaluate(tree, [cs, ns])
    values = np.broadcast_to(lanewise.value, cs.shape)
    crashed = np.broadcast_to(lanewise.crashed, cs.shape)
    c, n = z3.Ints("c n")
    term, crash = symbolic(tree, [c, n])
    for i, (cv, nv) in enumerate(points):
        expected = python(function, cv, nv)
        outcome = concrete(tree, [cv, nv])
        assert outcome.crashed == (expected is None), (cv, nv)
        assert bool(crashed[i]) == (expected is None), (cv, nv)
        pairs = [(c, z3.IntVal(cv)), (n, z3.IntVal(nv))]
        assert at(crash, pairs) is (expected is None), (cv, nv)
        if expected is not None:
            assert (outcome.value, values[i], at(term, pairs)) == (expected,) * 3, (cv, nv)


@pytest.mark.parametrize(
    ("function", "c", "n", "what", "line"),
    [
        (asserts, 3, 0, "assertion failed in asserts", "assert n > 0"),
        (raises, 3, -1, "raise in raises", "raise ValueError"),
        (divides, 3, 0, "division by zero in divides", "return c // n + c % (n + 1)"),
        (unguarded_and, 3, 0, "division by zero in unguarded_and", "if c // n > 1"),
        (
            stops_at_the_first_crash,
            3,
            0,
            "assertion failed in stops_at_the_first_crash",
            "assert n != 0",
        ),
    ],
)
def test_a_crash_names_file_line_and_cause(
    function: Callable[[int, int], int], c: int, n: int, what: str, line: str
) -> None:
    """The first crash of a lane is reported as ``file:line: cause in function``, the line
    being the statement Python raises at."""
    outcome = concrete(parse(function), [c, n])
    assert outcome.crashed and outcome.where is not None
    where, _, cause = outcome.where.partition(": ")
    path, _, number = where.rpartition(":")
    assert Path(path) == Path(__file__) and cause == what
    assert Path(__file__).read_text().splitlines()[int(number) - 1].strip().startswith(line)


def test_operands_are_evaluated_only_on_the_lanes_python_evaluates_them() -> None:
    """With every lane dividing by zero on the right of ``and``/``or``/``if``, only the lanes
    Python would evaluate it on crash (the others are not live there)."""
    n = np.array([0, 0, 1, 2])
    c = np.array([5, 5, 5, 5])
    assert not np.any(evaluate(parse(guarded_and), [c, n]).crashed)
    assert not np.any(evaluate(parse(guarded_or), [c, n]).crashed)
    assert not np.any(evaluate(parse(guarded_if_expression), [c, n]).crashed)
    assert list(np.broadcast_to(evaluate(parse(unguarded_and), [c, n]).crashed, (4,))) == [
        True,
        True,
        False,
        False,
    ]


# --- stand-ins: members are interpreted, nothing is compiled ---------------------------------

MEMBERS_SCHEDULER = """\
from vllm.helpers import floor_to


class Scheduler:
    def _mamba_block_aligned_split(self, request, num_new_tokens, local=0, external=0):
        start = request.num_computed_tokens + local + external
        end = self._limit(start + num_new_tokens, grid=self._grid)
        return max(end - start, self._zero())

    @property
    def _grid(self):
        return self._double(self.cache_config.block_size) // 2

    @staticmethod
    def _double(x):
        return 2 * x

    def _limit(self, end, grid=1):
        if end >= self._total_of(self):
            return end
        return floor_to(end, grid)

    @staticmethod
    def _total_of(scheduler):
        return scheduler.max_num_scheduled_tokens * 0 + scheduler._tokens

    @property
    def _tokens(self):
        return 49

    def _zero(self):
        return 0
"""
HELPERS = "def floor_to(x, b):\n    return x // b * b\n"


@pytest.fixture
def members_tree(tmp_path: Path) -> Path:
    (tmp_path / SCHEDULER_FILE).parent.mkdir(parents=True)
    (tmp_path / SCHEDULER_FILE).write_text(MEMBERS_SCHEDULER)
    (tmp_path / "vllm/helpers.py").write_text(HELPERS)
    return tmp_path / SCHEDULER_FILE


def _only_ast_compile(real: Callable[..., Any]) -> Callable[..., Any]:
    """``compile`` that only parses (what ``ast.parse`` does) and refuses to make code."""

    def guarded(
        source: Any, filename: Any, mode: str, flags: int = 0, *args: Any, **kwargs: Any
    ) -> Any:
        if not flags & ast.PyCF_ONLY_AST:
            raise AssertionError(f"compiled {filename}")
        return real(source, filename, mode, flags, *args, **kwargs)

    return guarded


def _never(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{name} was called")

    return refuse


def test_members_are_interpreted_never_compiled(
    members_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split calling a method (with a keyword argument and a default), a static method
    (also through an explicit object), reading properties and a helper of another module:
    loaded and run in the concrete, vectorised and symbolic forms while ``compile`` may only
    parse and ``exec``/``eval`` may not run at all."""
    monkeypatch.setattr(builtins, "compile", _only_ast_compile(builtins.compile))
    monkeypatch.setattr(builtins, "exec", _never("exec"))
    monkeypatch.setattr(builtins, "eval", _never("eval"))
    methods = load_scheduler(members_tree)
    assert {name: m.kind for name, m in methods.cls.members.items()} == {
        "_mamba_block_aligned_split": "method",
        "_grid": "property",
        "_double": "staticmethod",
        "_limit": "method",
        "_total_of": "staticmethod",
        "_tokens": "property",
        "_zero": "method",
    }
    cfg = Config(block=16, prompt=49, max_sched=16)
    view = step_view(cfg, 0, lambda function, args: function(*args))
    split = methods.method("_mamba_block_aligned_split")
    expected = {(0, 16): 16, (0, 20): 16, (3, 40): 29, (40, 9): 9, (45, 2): 0}
    for (c, n), chunk in expected.items():
        me, request = standins(view, c, methods.cls)
        assert concrete(split, [me, request, n, 0, 0]).value == chunk, (c, n)
    me, request = standins(view, 1, methods.cls)
    assert concrete(split, [me, request, 46, 1, 1]).value == 46  # c = 3: ends at T = 49
    cs = np.array([c for c, _ in expected])
    ns = np.array([n for _, n in expected])
    me, request = standins(view, cs, methods.cls)
    values = evaluate(split, [me, request, ns, 0, 0]).value
    assert list(values) == list(expected.values())
    c, n = z3.Ints("c n")
    me, request = standins(view, c, methods.cls)
    term, crash = symbolic(split, [me, request, n, 0, 0])
    for (cv, nv), chunk in expected.items():
        assert at(term, [(c, z3.IntVal(cv)), (n, z3.IntVal(nv))]) == chunk
    assert crash is False
    assert "vllm" not in sys.modules


# --- outside the subset ----------------------------------------------------------------------

OUTSIDE = [
    ("for loop", "    for i in (1, 2):\n        n = n - i\n    return n\n", 2, "For"),
    ("while loop", "    while n > 0:\n        n = n - 1\n    return n\n", 2, "While"),
    ("true division", "    return n / 2\n", 2, "Div"),
    ("power", "    return n ** 2\n", 2, "Pow"),
    ("shift", "    return n << 1\n", 2, "LShift"),
    ("bitwise and", "    return n & 1\n", 2, "BitAnd"),
    ("list", "    x = [n]\n    return n\n", 2, "List"),
    ("dict", "    x = {1: n}\n    return n\n", 2, "Dict"),
    ("subscript", "    x = (n, n)\n    return x[0]\n", 3, "Subscript"),
    ("list comprehension", "    return min([n for n in (1, 2)])\n", 2, "ListComp"),
    ("lambda", "    f = lambda x: x\n    return n\n", 2, "nested function"),
    ("nested def", "    def g(x):\n        return x\n    return n\n", 2, "nested function"),
    ("import", "    import os\n    return n\n", 2, "Import"),
    ("try", "    try:\n        n = 1\n    finally:\n        pass\n    return n\n", 2, "Try"),
    ("with", "    with cfg:\n        n = 1\n    return n\n", 2, "With"),
    ("global", "    global n2\n    return n\n", 2, "Global"),
    ("f-string", "    x = f'{n}'\n    return n\n", 2, "JoinedStr"),
    ("float", "    return n + 0.5\n", 2, "0.5"),
    ("tuple unpacking", "    a, b = n, n\n    return a\n", 2, "one plain name"),
    ("two targets", "    a = b = n\n    return a\n", 2, "one plain name"),
    ("walrus", "    if (m := n) > 0:\n        return m\n    return n\n", 2, "NamedExpr"),
    ("in", "    return 1 if n in (1, 2) else 0\n", 2, "In"),
    ("is not None only", "    return 1 if n is 3 else 0\n", 2, "`is` compares with None"),
    ("builtin call", "    return abs(n)\n", 2, "abs"),
    ("bare call", "    min(n, 1)\n    return n\n", 2, "bare expression"),
    ("dunder name", "    x = __name__\n    return n\n", 2, "__name__"),
    ("dunder attribute", "    x = cfg.__class__\n    return n\n", 2, "__class__"),
    ("two loops", "    return min((a for a in (1,) for b in (2,)), default=0)\n", 2, "single"),
    ("del", "    del n\n    return 0\n", 2, "Delete"),
    ("yield", "    x = yield n\n    return n\n", 2, "Yield"),
    ("starred display", "    x = (*(n, 1),)\n    return n\n", 2, "Starred"),
    ("set", "    x = {n}\n    return n\n", 2, "Set"),
    ("bytes", "    x = b'a'\n    return n\n", 2, "b'a'"),
]  # fmt: skip
"""(case, body of ``split(cfg, c, n)``, the line of the offence, what the message names)."""


@pytest.mark.parametrize(
    ("case", "body", "line", "what"),
    [pytest.param(*o, id=o[0]) for o in OUTSIDE],
)
def test_outside_the_subset_names_file_and_line(
    case: str, body: str, line: int, what: str, tmp_path: Path
) -> None:
    """Reading the function (never importing its module) is a one-line SubsetError naming the
    file and the line of the construct."""
    path = tmp_path / "user_policy.py"
    path.write_text(f"def split(cfg, c, n):\n{body}")
    with pytest.raises(SubsetError) as info:
        read_function(path, "split")
    message = str(info.value)
    assert f"{path}:{line}:" in message and what in message, message
    assert "\n" not in message
    assert "user_policy" not in sys.modules


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("@staticmethod\ndef split(cfg, c, n):\n    return n\n", ":2: decorators are outside"),
        ("def split(cfg, c, n, *rest):\n    return n\n", ":1: split: decorators and */**"),
        ("def split(cfg, c, n, /):\n    return n\n", ":1: split: positional-only"),
        ("import math\n\n\ndef split(cfg, c, n):\n    return math.floor(n)\n", ":1: 'math'"),
        ("def split(cfg, c, n):\n    return helper(n)\n", ":2: split uses 'helper'"),
        ("X = 3\n\n\ndef split(cfg, c, n):\n    return n + X\n", ":5: split uses 'X'"),
    ],
)
def test_names_outside_the_subset_are_errors(text: str, what: str, tmp_path: Path) -> None:
    """Decorators, */** and positional-only parameters, imports, unknown names and module
    constants: errors naming file and line."""
    path = tmp_path / "user_policy.py"
    path.write_text(text)
    with pytest.raises(SubsetError, match=r"user_policy\.py" + what.replace("*", r"\*")):
        read_function(path, "split")


def test_a_user_file_is_read_not_imported(tmp_path: Path) -> None:
    """Module-level code of a user's file never runs: the file may even crash on import."""
    path = tmp_path / "user_policy.py"
    path.write_text(
        "raise SystemExit('imported')\n\n\n"
        "def helper(x, grid=4):\n    return x // grid * grid\n\n\n"
        "def split(cfg, c, n):\n    return helper(c + n, grid=cfg.block) - c\n"
    )
    tree = read_function(path, "split")
    cfg = Config(block=8, prompt=40, max_sched=16)
    assert concrete(tree, [cfg, 3, 14]).value == 13
    assert "user_policy" not in sys.modules


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: "# a line above\n" + text, id="lines-shifted"),
        pytest.param(lambda text: text.replace("return 0", "return 1"), id="body-changed"),
    ],
)
def test_an_own_function_whose_file_changed_is_refused(
    edit: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text the interpreter parses is the code that runs: once a function's file is
    edited after it was loaded (shifted lines, a changed body), parsing it is a SubsetError,
    never a verdict on other code. Parsed before the edit, it stays as it was."""
    path = tmp_path / "own_stage.py"
    text = "def stage(cfg, c, n):\n    return n - 1\n\n\ndef other(cfg, c, n):\n    return 0\n"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("own_stage", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "own_stage", module)
    spec.loader.exec_module(module)
    assert parse(module.stage).node.body[0].lineno == 2
    path.write_text(edit(text))
    os.utime(path, ns=(0, 0))
    assert parse(module.stage).node.body[0].lineno == 2
    with pytest.raises(SubsetError, match=r"own_stage.py:\d+: .*file changed while chunkproof ran"):
        parse(module.other)


def test_runtime_subset_errors_name_file_and_line(tmp_path: Path) -> None:
    """What only evaluation can find (a call with a wrong arity, min of one value, a missing
    return, a read of an attribute the value lacks) is a SubsetError with file and line."""
    path = tmp_path / "user_policy.py"
    path.write_text(
        "def two(a, b):\n    return a\n\n\n"
        "def arity(cfg, c, n):\n    return two(n)\n\n\n"
        "def lone_min(cfg, c, n):\n    return min(n)\n\n\n"
        "def no_return(cfg, c, n):\n    if n > 0:\n        return n\n\n\n"
        "def attribute(cfg, c, n):\n    return cfg.no_such_field\n"
    )
    cfg = Config(block=8, prompt=40, max_sched=16)
    for name, line, what in (
        ("arity", 1, "missing argument 'b'"),
        ("lone_min", 10, "min/max take two or more values"),
        ("no_return", 13, "can end without a return"),
        ("attribute", 19, "no value for attribute 'cfg.no_such_field'"),
    ):
        with pytest.raises(SubsetError, match=rf"{path}:{line}: .*{what}"):
            concrete(read_function(path, name), [cfg, 0, 0])


def test_integers_are_bounded_in_the_concrete_and_vectorised_forms(tmp_path: Path) -> None:
    """A product past the exact range is an error, not a silent wrap-around or a long run."""
    path = tmp_path / "user_policy.py"
    path.write_text("def split(cfg, c, n):\n    return n" + " * n" * 70 + "\n")
    tree = read_function(path, "split")
    cfg = Config(block=8, prompt=40, max_sched=16)
    assert concrete(tree, [cfg, 0, 1]).value == 1
    with pytest.raises(ValueTooLarge, match=f"exceeds {MAX_BITS} bits"):
        concrete(tree, [cfg, 0, 16])
    with pytest.raises(ValueTooLarge, match="exceeds 2"):
        evaluate(tree, [cfg, 0, np.array([1, 16])])
