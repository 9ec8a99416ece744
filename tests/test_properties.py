"""For every property, a policy that breaks it and one that keeps it (SPEC P, explorer)."""

from __future__ import annotations

import pytest

from chunkproof.checker.ranges import Ranges
from chunkproof.checker.search import explore
from chunkproof.model.builtin import get_builtin

GRID = Ranges(
    block=(4, 8), lookahead=(0, 1, 2, 3), prompt=tuple(range(1, 25)), max_sched=tuple(range(1, 17))
)

CASES = [
    # property, breaks it, keeps it (on GRID, inside each policy's accepted configurations)
    ("P1", "vllm-0.33", "lookahead-in-split"),  # the #61762-class livelock
    ("P2", "vllm-0.33", "keep-subblock"),
    ("P3", "keep-subblock", "vllm-0.33"),  # sub-block chunks that later cross a block end
    ("P4", "vllm-0.33", "vllm-0.27"),  # the reservation trims to an off-grid T - L
    ("P5", "vllm-0.27", "vllm-0.33"),  # no reservation before 0.28
    ("P6", "vllm-0.28", "vllm-0.33"),  # #50235: N = kB in one chunk loses the resend state
    ("P7", "vllm-0.33", "lookahead-in-split"),
]


@pytest.mark.parametrize(("pid", "breaks", "keeps"), CASES)
def test_property_has_a_breaking_and_a_keeping_policy(pid: str, breaks: str, keeps: str) -> None:
    bad = explore(get_builtin(breaks), GRID, [pid])
    good = explore(get_builtin(keeps), GRID, [pid])
    assert bad.failing(pid, "main") > 0
    assert good.failing(pid, "main") == 0
    assert good.tally.configs["main"] > 1000


def test_p5_strict_is_broken_by_the_fix_and_kept_by_033() -> None:
    fix = explore(get_builtin("lookahead-in-split"), GRID, ["P5"], window="strict")
    latest = explore(get_builtin("vllm-0.33"), GRID, ["P5"], window="strict")
    assert fix.failing("P5", "main") > 0
    assert latest.failing("P5", "main") == 0


def test_refused_and_degenerate_configurations_are_reported_apart() -> None:
    v17 = explore(get_builtin("vllm-0.17"), GRID, ["P1"])
    assert v17.failing("P1", "main") == 0
    assert v17.failing("P1", "refused") > 0  # B > M: starvation 0.17 refuses at start-up
    v33 = explore(get_builtin("vllm-0.33"), GRID, ["P1"])
    assert v33.failing("P1", "degenerate") > 0  # M < L
