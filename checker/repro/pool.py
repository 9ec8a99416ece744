"""Standalone pytest repros of a counterexample whose requests share a KV block pool
(``chunkproof repro FILE --pytest OUT`` on a file of ``chunkproof system`` with a pool; SPEC
KV2 rule 5).

The file is a multi-request repro's (:mod:`chunkproof.checker.repro.system`: the requests,
the stand-ins, the recorded steps, the real split and reservation read from a vLLM source
tree) whose ``schedule()`` asks the tree's own ``KVCacheManager`` for every chunk: it carries
:mod:`chunkproof.source.kv_run` and :mod:`chunkproof.source.kv_alloc_run`, whose ``TreePool``
compiles the manager from the source text over a pool of the recorded size. The running loop
preempts ``running.pop()`` while the pool refuses a chunk, or the request itself, which ends
the loop; the waiting loop runs only when nothing was preempted and admits through the
manager's test for the whole sequence, at the hit the manager's own prefix lookup finds (the
prompts are distinct and the pool keeps what the manager caches, evicting in vLLM's order:
SPEC KV2 rule 5e; a request whose c0 is a KV connector's is admitted at x where the trace says
so, passed to ``allocate_slots`` with its first chunk, rule 5g). Where the counterexample
resumes a preempted request at hit 0, the request is admitted without the blocks the lookup
found (taken as evicted: a run whose other requests evicted them); a recorded hit the lookup
does not find fails the test with both values, a trace the tree cannot follow. The test
offers the recorded budgets (for S-POOL the whole budget M from the loop's first step on) and
checks SPEC P0 on every request a loop reached, and that no admission makes the manager's
pool raise (rule 5g). An S-POOL file fails when the run comes back to the lists and computed
tokens it had before the loop's first step: from there it repeats for ever; on a tree whose
pool serves the requests it does not come back, and the file passes. An S-LIVE, HOL or
STARVE file judges each step as the file without a pool does
(:data:`~chunkproof.checker.repro.system.CHECKS`), a preemption counting as a change of state
(no stall).
"""

from __future__ import annotations

from string import Template

from chunkproof.checker.repro.frame import (
    PRELUDE,
    REAL_METHODS,
    STEP_CLASS,
    file_docstring,
    module_source,
    real_methods,
)
from chunkproof.checker.repro.requests import KV_DRIVER, POOL_DRIVER
from chunkproof.checker.repro.system import (
    BY_LABEL,
    CHECKS,
    LOOP_HELPERS,
    NO_ENCODER,
    OUTCOME,
    REQUESTS,
    requests_values,
)
from chunkproof.model.system_counterexample import SystemCounterexample
from chunkproof.source import kv_alloc_run, kv_run
from chunkproof.source.loading import recorded_policy
from chunkproof.spec.properties import PROPERTIES
from chunkproof.spec.scheduler_step import pool_model_len, step_loop_rules
from chunkproof.spec.slots import eagle_drop
from chunkproof.spec.system_properties import SYSTEM_PROPERTIES


def pool_repro_source(cx: SystemCounterexample, source_name: str) -> str:
    """The text of the standalone pytest file for the pooled counterexample ``cx`` (module
    docstring)."""
    assert cx.blocks > 0
    policy = recorded_policy(cx)
    rule = {**PROPERTIES, **SYSTEM_PROPERTIES}[cx.property]
    lasso = cx.property == "S-POOL"
    assert cx.loop is not None or not lasso
    judged = (
        "S-POOL (the run is not back where the loop's first step found it)"
        if lasso
        else f"{cx.property} at every step"
    )
    offered = (
        "the counterexample's budgets step by step to schedule()'s two loops over the requests, "
        f"each chunk asking the tree's own KVCacheManager for its blocks in a pool of "
        f"{cx.blocks} (FCFS, {step_loop_rules(policy).describe()}, preemption as schedule() "
        f"has it); it asserts {judged}, and P0"
    )
    requests = "; ".join(f"#{i}: {cfg.describe()}" for i, cfg in enumerate(cx.requests))
    title = f"{cx.property} {rule.name} breaks on {cx.policy} ({requests}; {cx.blocks} KV blocks)"
    imports = [*module_source(kv_run)[0], *module_source(kv_alloc_run)[0]]
    name = f"{cx.property}_{rule.name}".lower().replace("-", "_")
    values = requests_values(cx, source_name) | {
        "docstring": file_docstring(cx, cx.requests, title, offered, source_name, "S-POOL"),
        "definition": rule.definition,
        "loop_helpers": LOOP_HELPERS,
        "kv_use_eagle": repr(eagle_drop(cx.requests[0])),
        "pool_blocks": str(cx.blocks),
        "max_model_len": str(pool_model_len(cx.requests)),
        "loop": str(cx.loop) if lasso else "None",
        "kv_run": module_source(kv_run)[1],
        "kv_alloc_run": module_source(kv_alloc_run)[1],
        "test_name": f"test_{name}",
        "property": cx.property,
        "checked": "P0" if cx.property == "P0" else f"{cx.property} (or P0)",
        "check_body": "" if lasso else Template(CHECKS[cx.property]).substitute(encoder_of=""),
    }
    head = PRELUDE + REQUESTS + _POOL + STEP_CLASS + _RECORDED
    template = Template(head + (_LASSO if lasso else _STEPS) + _SCHEDULE + _TAIL)
    return template.substitute(
        values | BY_LABEL | AT_HIT | NO_ENCODER | real_methods(policy, [], imports),
        outcome=OUTCOME,
    )


AT_HIT = {
    "step_parameters": ", label: int, hit: int = 0",
    "step_lines": "\n    label: int,\n    hit: int = 0,",
    "step_config": "at_hit(CONFIGS[label], hit)",
}
"""``schedule_step`` of a pooled file: on request ``label``, admitted at ``hit`` (c0 > 0 where
the waiting loop admits it at a hit, SPEC KV2 rules 2d and 5e; 0 in the running loop)."""


_POOL = '''
# The KV block pool the requests share (SPEC KV2 rule 5): the tree's own KVCacheManager (at the
# end of the file: chunkproof.source.kv_alloc_run.TreePool, over chunkproof.source.kv_run's
# compiler), built by its __init__ from the source text over POOL_BLOCKS blocks, the null
# block among them. Every request is of its own tokens; one admitted at a local c0 > 0 is seeded
# first (an identical request computes [0, c0) and [c0, P) and finishes); the pool keeps what
# the manager caches, so a request is admitted at the hit its lookup finds. One whose c0 is a
# KV connector's (x = c0) is admitted at x where the trace says so (CONNECTED), loaded
# synchronously: passed to allocate_slots with its first chunk (SPEC KV2 rule 5g).
KV_USE_EAGLE = $kv_use_eagle  # the manager's use_eagle: D, off under hash lookahead L_h
POOL_BLOCKS = $pool_blocks
MAX_MODEL_LEN = $max_model_len  # the longest prompt + 1
LOOP = $loop  # S-POOL: the recorded run comes back to the state before this step


@pytest.fixture
def pool() -> TreePool:
    """The requests in the waiting queue (ARRIVAL) of the tree's own manager."""
    root = vllm_source_root()
    try:
        found = TreePool(root, CONFIGS, KV_USE_EAGLE, POOL_BLOCKS, MAX_MODEL_LEN, True, True)
    except SourceError as exc:
        pytest.fail(f"cannot run the KV cache code of {root}: {exc}", pytrace=False)
    found.waiting = list(ARRIVAL)
    return found


def at_hit(config: SimpleNamespace, hit: int) -> SimpleNamespace:
    """``config`` admitted at ``hit`` (its c0: the waiting loop passes the hit to the split);
    a running request (``hit`` 0) is past its admission, whatever c0 it was admitted at."""
    return SimpleNamespace(**{**vars(config), "start": hit})


def resume(
    pool: TreePool, label: int, recorded: dict[int, int] | None, connected: tuple[int, ...]
) -> int:
    """The hit waiting request ``label`` is admitted at (SPEC KV2 rules 5e-5g): the KV
    connector's x where the counterexample admits it there (``connected``), else the one the
    tree's lookup finds; where the counterexample resumes it at 0, none (the blocks found
    taken as evicted); a recorded hit the lookup does not find fails the test."""
    if label in connected:
        return pool.connect(label)
    found = pool.lookup(label)
    wanted = (recorded or {}).get(label, found)
    if wanted == found:
        return found
    if wanted == 0:
        pool.forget(label)
        return 0
    pytest.fail(
        f"#{label}: the counterexample resumes it at hit {wanted}, where the tree's lookup "
        f"finds {found}: the tree does not follow the trace",
        pytrace=False,
    )


'''

_RECORDED = '''class Recorded(NamedTuple):
    """One recorded schedule() step: the budget offered and the stages each request a loop
    reached got from the budget left, by request label."""

    budget: int
    stages: dict[int, Step]
    hits: dict[int, int] | None = None
    """The hit each preempted waiting request resumed at (SPEC KV2 rule 5e)."""
    connected: tuple[int, ...] = ()
    """The requests whose hit is the KV connector's (SPEC KV2 rule 5g)."""


$outcome# The counterexample: what $policy does, step by step.
RECORDED = $recorded


'''

_LASSO = '''def test_s_pool_pool_live(vllm: Extracted, pool: TreePool) -> None:
    """S-POOL: $definition."""
    scheduler = standin_tree(SCHEDULER_LABEL, SCHEDULER_ATTRIBUTES, vllm.scheduler_type)
    seen = []
    for index, recorded in enumerate(RECORDED):
        seen.append(state(pool))
        outcome = schedule(
            vllm, scheduler, pool, recorded.budget, recorded.hits, recorded.connected
        )
        where = f"step {index} (budget {recorded.budget})"
        for label, step in outcome.reached.items():
            problem = unsafe(step)
            assert problem is None, f"P0: {where}, #{label}: {problem.removeprefix('P0: ')}"
    assert state(pool) != seen[LOOP], (
        f"S-POOL: offered the whole budget M={WHOLE_BUDGET} from step {LOOP} on, the run comes "
        f"back to the same state after {len(RECORDED) - LOOP} step(s) and repeats for ever: "
        f"running {seen[LOOP][0]}, waiting {seen[LOOP][1]}, computed {seen[LOOP][2]} (the tree's "
        f"KVCacheManager refuses a chunk in a pool of {POOL_BLOCKS} blocks and the running loop "
        "preempts)"
    )


def state(pool: TreePool) -> tuple[list[int], list[int], list[int]]:
    """The running list, the waiting queue and every request's computed tokens."""
    computed = [request.num_computed_tokens for request in pool.requests]
    return list(pool.running), list(pool.waiting), computed


'''

_STEPS = '''def $test_name(vllm: Extracted, pool: TreePool) -> None:
    """$property: $definition."""
    scheduler = standin_tree(SCHEDULER_LABEL, SCHEDULER_ATTRIBUTES, vllm.scheduler_type)
    for index, recorded in enumerate(RECORDED):
        if not pool.running and not pool.waiting:
            return
        outcome = schedule(
            vllm, scheduler, pool, recorded.budget, recorded.hits, recorded.connected
        )
        problem = violation(vllm, scheduler, index, outcome)
        assert problem is None, f"{problem}; recorded: {recorded.stages}"


def who(label: int, c: int) -> str:
    """A request by its label, T and c."""
    return f"#{label} (T={CONFIGS[label].tokens}, c={c})"


def violation(vllm: Extracted, scheduler: StandIn, index: int, outcome: Outcome) -> str | None:
    """What breaks $checked at step ``index``, if anything: "PROPERTY: step i (budget b): why"."""
$check_body

'''

_SCHEDULE = '''def schedule(
    vllm: Extracted,
    scheduler: StandIn,
    pool: TreePool,
    budget: int,
    hits: dict[int, int] | None = None,
    connected: tuple[int, ...] = (),
) -> Outcome:
    """One schedule() step over the requests (history note 6; SPEC KV2 rule 5): the running
    loop offers each running request in order the budget left and asks the tree's manager for
    its chunk; while it refuses, the last running request is preempted, until the chunk fits
    or the request preempts itself, which ends the loop (a zero: RUNNING_ZERO). Only when
    nothing was preempted, the waiting loop offers each waiting request in queue order the
    budget left from its hit (``resume``, the recorded ``hits`` and ``connected``) while
    budget and a seat remain and admits one the manager grants (its test for the whole
    sequence); a refusal
    ends the loop, and so does a zero where SPLIT_ZERO or LATER_ZERO says break (each waiting
    request behind that break is then run at the budget left: HOL). A request whose step
    breaks P0 gets nothing. Each request is offered the budget left capped by theta_eff
    (THETA_PER_STEP)."""
    eligible = len(pool.running) + len(pool.waiting) + (budget < WHOLE_BUDGET)
    theta = THETA_PER_STEP if eligible >= 2 else 0
    pool.begin()
    left, reached, scheduled, preempted = budget, {}, {}, []
    index = 0
    while index < len(pool.running) and left > 0:
        label = pool.running[index]
        c = pool.requests[label].num_computed_tokens
        step = reached[label] = schedule_step(vllm, scheduler, c, offer(left, theta), label)
        if taken(step) == 0:
            if RUNNING_ZERO == "break" and unsafe(step) is None:
                break
            index += 1
            continue
        while not pool.allocate(label, step.chunk):
            victim = pool.running.pop()
            pool.preempt(victim)
            preempted.append(victim)
            if victim == label:
                break
        if label in preempted:
            break
        scheduled[label] = step.chunk
        left -= step.chunk
        index += 1
    broke_at, behind = None, {}
    for label in [] if preempted else list(pool.waiting):
        if broke_at is not None:
            c = resume(pool, label, hits, connected)
            behind[label] = schedule_step(vllm, scheduler, c, offer(left, theta), label, c)
            continue
        if left == 0 or len(pool.running) >= MAX_NUM_SEQS:
            break
        c = resume(pool, label, hits, connected)
        step = reached[label] = schedule_step(vllm, scheduler, c, offer(left, theta), label, c)
        if taken(step) == 0:
            if unsafe(step) is None and (SPLIT_ZERO if step.split <= 0 else LATER_ZERO) == "break":
                broke_at = label
            continue
        try:
            granted = pool.allocate(label, step.chunk, admission=True)
        except PoolExhausted as exc:
            raise AssertionError(
                f"P0: #{label}, admitted at hit {c} with {step.chunk} tokens, passes the "
                f"admission test and its count, and the pool raises: {exc} (the engine core "
                "is down)"
            ) from None
        if not granted:
            break
        pool.waiting.remove(label)
        pool.running.append(label)
        scheduled[label] = step.chunk
        left -= step.chunk
    for label in pool.end(scheduled):
        pool.running.remove(label)
    computed = [request.num_computed_tokens for request in pool.requests]
    changed = bool(scheduled or preempted)
    running, waiting = list(pool.running), list(pool.waiting)
    return Outcome(
        budget, eligible, theta, reached, broke_at, behind, changed, running, waiting, computed
    )


$loop_helpers'''

_TAIL = REAL_METHODS + KV_DRIVER + POOL_DRIVER
"""The real methods, and the carried KV cache drivers."""
