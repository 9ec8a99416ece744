"""The explorer's verdicts equal a plain enumeration with the native policy (hypothesis).

The enumeration follows every budget 1..M from every reachable state with the native step,
and checks each property by its definition (SPEC P): no vectorised form, no graph, no budget
capping, no grouping of M values.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chunkproof.checker.explorer import evaluate_config, family_tables, state_graphs
from chunkproof.model.builtin import builtin_policies
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.model.policy import Policy
from chunkproof.model.step import step
from chunkproof.model.trajectory import run
from chunkproof.spec import properties as props

WANTED = ("P1", "P2", "P3", "P4", "P5", "P6", "P7")


@dataclass
class Truth:
    violated: dict[str, bool]
    b_star: int | None
    worst_excess: int | None


def brute_force(policy: Policy, cfg: Config, window: str) -> Truth:
    big_e, m = cfg.prefill_end, cfg.max_sched
    reach, stack = set(), [cfg.start]
    violated = dict.fromkeys(WANTED, False)
    zero_budgets: dict[int, list[int]] = {}
    while stack:
        c = stack.pop()
        if c in reach or c >= big_e:
            continue
        reach.add(c)
        for b in range(1, m + 1):
            s = step(policy, cfg, c, b)
            if s.chunk == 0:
                zero_budgets.setdefault(c, []).append(b)
                continue
            stack.append(s.end)
            violated["P3"] |= props.crosses_block_end(cfg, c, s.end)
            violated["P4"] |= props.misaligned(cfg, c, s.end)
            check = props.in_window if window == "strict" else props.in_window_relaxed
            violated["P5"] |= check(cfg, c, s.n, s.end)
            violated["P6"] |= props.skips_resend(cfg, c, s.end)
    stuck = any(step(policy, cfg, c, m).chunk == 0 for c in reach)
    violated["P1"] = violated["P2"] = stuck
    b_star = None if stuck else max((max(zero_budgets.get(c, [0])) + 1 for c in reach), default=1)
    excess = []
    for b in range(1, m + 1):
        trajectory = run(policy, cfg, [b])
        if trajectory.finished:
            excess.append(len(trajectory.steps) - props.ideal_steps(cfg, b))
        elif b == m:
            violated["P7"] = True
    return Truth(violated, b_star, max(excess) if excess else None)


configs: st.SearchStrategy[dict[str, int]] = st.fixed_dictionaries(
    {
        "block": st.integers(1, 6),
        "prompt": st.integers(1, 14),
        "extra": st.integers(0, 2),
        "lookahead": st.integers(0, 3),
        "drop": st.integers(0, 1),
        "threshold": st.sampled_from([0, 0, 2, 5]),
        "start": st.integers(0, 4),
        "hash_lookahead": st.sampled_from([0, 0, 1]),
    }
)


def _config(raw: dict[str, int], max_sched: int) -> Config | None:
    try:
        return Config(
            block=raw["block"],
            prompt=raw["prompt"],
            tokens=raw["prompt"] + raw["extra"],
            max_sched=max_sched,
            lookahead=raw["lookahead"],
            drop=bool(raw["drop"]),
            threshold=raw["threshold"],
            start=raw["start"],
            hash_lookahead=raw["hash_lookahead"],
        )
    except ConfigError:
        return None


@settings(max_examples=300, deadline=None)
@given(
    raw=configs,
    top=st.integers(1, 9),
    policy=st.sampled_from(builtin_policies()),
    window=st.sampled_from(["relaxed", "strict"]),
)
def test_explorer_equals_brute_force(
    raw: dict[str, int], top: int, policy: Policy, window: str
) -> None:
    base = _config(raw, top)
    assume(base is not None)
    assert base is not None
    ms = tuple(range(1, top + 1))
    (tables,) = family_tables(policy, [base], ms, None, WANTED, window)
    seen = set()
    for sg in state_graphs(tables):
        for m in sg.ms:
            seen.add(m)
            result = evaluate_config(tables, sg, m, None)
            truth = brute_force(policy, base.replace(max_sched=m), window)
            for pid in WANTED:
                assert result.violated(pid) == truth.violated[pid], (pid, m, base)
            assert result.progress_budget == truth.b_star, (m, base)
            assert result.cost["worst_excess"] == truth.worst_excess, (m, base)
    assert seen == set(ms)
