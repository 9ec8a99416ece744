"""Solving a query case by case (``proofs.solving.solve_cases``) and the cases of the
single-request step (``SymbolicRequest.cases``): the split is exact, so a verdict never depends
on it, and it decides the conform cells the whole query left undecided."""

from __future__ import annotations

import pytest
import z3
from solver_limits import GUARD_MS, RLIMIT

from chunkproof.checker.cli.defaults import production_space, small_space, union
from chunkproof.checker.engines.conform import EQUAL, cell_difference
from chunkproof.model.builtin import get_builtin
from chunkproof.proofs.solving import solve_cases
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.request_symbolic import SymbolicRequest, cells

X = z3.Int("x")


def test_sat_in_one_case_gives_that_case_s_model() -> None:
    formula = z3.And(X > 3, X < 6)
    answer, model = solve_cases(formula, [X <= 4, X > 4], GUARD_MS, RLIMIT)
    assert answer == "sat" and model is not None
    assert model.eval(X).as_long() in (4, 5)


def test_unsat_only_when_every_case_is() -> None:
    formula = z3.And(X > 3, X < 4)
    assert solve_cases(formula, [X <= 4, X > 4], GUARD_MS, RLIMIT) == ("unsat", None)
    assert solve_cases(X == 7, [X <= 4, X > 4], GUARD_MS, RLIMIT)[0] == "sat"


@pytest.mark.parametrize("name", ["vllm-0.15", "vllm-0.28", "vllm-0.33", "lookahead-in-split"])
def test_the_cases_of_a_step_cover_every_input(name: str) -> None:
    """No input of any cell of the policy's production range lies outside every case."""
    policy = get_builtin(name)
    for cell in cells(production_space(policy))[::7]:
        model = SymbolicRequest(policy, cell, None)
        c, b = model.state("c")[0], model.action("b")[0]
        outside = z3.And(model.constraint, model.guard([c], [b]), z3.Not(z3.Or(*model.cases(c))))
        solver = z3.Solver()
        solver.add(outside)
        assert solver.check() == z3.unsat, (name, cell.describe())


def test_a_difference_is_found_in_its_case() -> None:
    """Two policies that differ: the split still finds an input where their steps differ."""
    a, b = get_builtin("vllm-0.32"), get_builtin("vllm-0.33")
    space = union([small_space(a), small_space(b)])
    found = [
        cell_difference(a, b, space.budget, GUARD_MS, RLIMIT, cell)[0] for cell in cells(space)
    ]
    assert "DIFFERENT" in found, found


def test_equal_policies_are_equal_on_every_cell_case_by_case() -> None:
    """A policy against itself: EQUAL on every cell of its production range."""
    policy = get_builtin("vllm-0.33")
    space = production_space(policy)
    for cell in cells(space)[::11]:
        assert cell_difference(policy, policy, space.budget, GUARD_MS, RLIMIT, cell)[0] == EQUAL


@pytest.mark.fidelity
def test_a_cell_the_whole_query_left_open_is_equal_case_by_case() -> None:
    """vllm-0.33 against the real 0.33.0 methods on the cell of conform's default range with
    B = G = H = alpha = 16 and L >= 1: the whole query ran past 20 s (UNKNOWN); its cases
    decide it EQUAL, by Z3's resource count."""
    a, b = get_builtin("vllm-0.33"), resolve_policy("vllm==0.33.0")
    space = union([production_space(a), production_space(b)])
    wanted = {"block": 16, "hash_block": 16, "checkpoint_alignment": 16, "retention": -1}
    (cell,) = [
        c
        for c in cells(space)
        if c.describe().items() >= wanted.items()
        and c.describe()["lookahead"] == ">= 1"
        and c.describe()["split_block"] == 16
    ]
    assert cell_difference(a, b, space.budget, GUARD_MS, RLIMIT, cell) == (EQUAL, None)
