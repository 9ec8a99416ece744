"""Standalone pytest repros of a multi-request counterexample (``chunkproof repro FILE --pytest
OUT`` on a file of ``chunkproof system``; SPEC N1).

The generated file is a single-request repro's (:mod:`chunkproof.checker.repro.requests`: the same
prelude,
``Step`` record, P0 check, real methods read from a vLLM source tree, call-site and budget-cap
functions, source loader) around ``schedule()``'s two loops over the requests as
:class:`~chunkproof.spec.scheduler_step.SchedulerStepModel` models them: the running list in order,
then the waiting queue in order while budget and a seat remain, each request offered the budget
left, a zero doing what the policy's loop rules say (every release: ``continue`` in the running
loop, ``break`` in the waiting loop, except that from C9 (0.33) a zero after the split skips the
request; a fork's own rules, read from its ``schedule()``). Every request's chunk comes from the
real split and reservation, and for a request with encoder items from the tree's own encoder
too
(:data:`chunkproof.checker.repro.requests.ENCODER_STEP`), on one real ``EncoderCacheManager`` the
requests
share, kept from step to step: a request the step takes allocates what its call scheduled before
the loop visits the next, and frees after the step. Starting from the recorded arrival order, the
test offers the recorded budgets step by step (with the adaptive floor, at the recorded eligible
counts; the system properties are judged on one step, so no budget beyond them) and checks every
step the way a single-request repro does: first SPEC P0 on every request a loop reached, then the
file's property (HOL: the waiting loop broke at a zero while a request behind it gets a chunk from
the budget left; S-LIVE: the whole budget M schedules nothing while work is left; STARVE: a step
schedules nothing while a request alone would get a chunk from its budget). A failure names the
property and the step (``AssertionError: HOL: step 0 (budget 3): ...``): the file fails while the
property is violated and passes on a fix. The recorded stage values are in the file (``RECORDED``)
and in each failure message beside the real code's.
"""

from __future__ import annotations

import textwrap
from string import Template

from chunkproof.checker.repro.frame import (
    ENCODER_DRIVER,
    ENCODER_STEP,
    PRELUDE,
    REAL_METHODS,
    REAL_REST,
    STEP_CLASS,
    Values,
    config_literal,
    dict_literal,
    encoder_values,
    file_docstring,
    module_source,
    one_line,
    real_methods,
    standins,
    step_literal,
)
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError
from chunkproof.model.system_counterexample import SystemCounterexample, SystemStep
from chunkproof.source import encoder_run
from chunkproof.source.loading import recorded_policy
from chunkproof.spec.properties import PROPERTIES, Property
from chunkproof.spec.scheduler_loops import DECODING, RUNNING
from chunkproof.spec.scheduler_step import (
    PHASE_NAMES,
    engine_settings,
    per_step_theta,
    shared_encoder,
    step_loop_rules,
)
from chunkproof.spec.system_properties import SYSTEM_PROPERTIES


def system_repro_source(cx: SystemCounterexample, source_name: str) -> str:
    """The text of the standalone pytest file for ``cx`` (module docstring). Its requests
    share the engine, so one stand-in scheduler serves them all. The requests with encoder
    items run the tree's own encoder (:data:`_ENCODER`), on one cache they share."""
    with_items = [label for label, cfg in enumerate(cx.requests) if cfg.items]
    policy = recorded_policy(cx)
    rules = step_loop_rules(policy)
    rule = _property(cx.property)
    checked = "P0" if cx.property == "P0" else f"P0 and {cx.property}"
    offered = (
        "the counterexample's budgets step by step to schedule()'s two loops over the requests "
        f"as chunkproof models them (``schedule`` below: FCFS, {rules.describe()}), and "
        f"asserts {checked}"
    )
    requests = "; ".join(f"#{i}: {cfg.describe()}" for i, cfg in enumerate(cx.requests))
    title = f"{cx.property} {rule.name} breaks on {cx.policy} ({requests})"
    name = f"{cx.property}_{rule.name}".lower().replace("-", "_")
    values = requests_values(cx, source_name) | {
        "docstring": file_docstring(cx, cx.requests, title, offered, source_name),
        "loop_helpers": LOOP_HELPERS,
        "outcome": OUTCOME,
        "test_name": f"test_{name}",
        "property": cx.property,
        "definition": rule.definition,
        "checked": "P0" if cx.property == "P0" else f"{cx.property} (or P0)",
    }
    if not with_items:
        checks = Template(CHECKS[cx.property]).substitute(encoder_of="")
        methods = real_methods(policy, [])
        return _TEMPLATE.substitute(values | BY_LABEL | NO_ENCODER | methods, check_body=checks)
    imports, driver = module_source(encoder_run)
    capacity, budget = shared_encoder(cx.requests)
    encoder = encoder_values(cx.requests[with_items[0]]) | _ENCODER_CALLS
    encoder |= {"encoder_cache": str(capacity), "encoder_budget": str(budget)}
    items = {label: [tuple(item) for item in cx.requests[label].items] for label in with_items}
    checks = Template(CHECKS[cx.property]).substitute(encoder_of=_ENCODER_CALLS["encoder_of"])
    methods = real_methods(policy, [], imports)
    return _ENCODER_TEMPLATE.substitute(
        values | BY_LABEL | encoder | methods,
        check_body=checks,
        items_by_label=repr(items),
        encoder_run=driver,
    )


def requests_values(cx: SystemCounterexample, source_name: str) -> Values:
    """The values of :data:`REQUESTS` and the recorded steps of ``cx`` (read from
    ``source_name``): the requests' configurations and stand-ins (one stand-in scheduler: they
    share the engine), the engine, the loop rules read from the policy's ``schedule()``."""
    if len({engine_settings(cfg) for cfg in cx.requests}) != 1:
        raise ChunkproofError(f"{source_name}: the requests do not share the engine's settings")
    attributes = [standins(cx, cfg, source_name) for cfg in cx.requests]
    policy = recorded_policy(cx)
    rules = step_loop_rules(policy)
    return {
        "configs": list_literal([config_literal(cfg) for cfg in cx.requests]),
        "scheduler": dict_literal(attributes[0][0]),
        "requests": list_literal([dict_literal(request) for _, request in attributes]),
        "prefill_ends": repr([cfg.prefill_end for cfg in cx.requests]),
        "arrival": repr(list(cx.arrival)),
        "max_seqs": str(cx.max_seqs),
        "whole": str(cx.budget_model().high),
        "running_zero": repr(rules.running),
        "split_zero": repr(rules.split),
        "later_zero": repr(rules.later),
        "theta": str(cx.requests[0].threshold if per_step_theta(policy) else 0),
        "adaptive": str(cx.adaptive),
        "composition": policy.composition,
        "policy": one_line(cx.policy),
        "recorded": recorded_literal(cx),
    }


def _property(pid: str) -> Property:
    """The scheduler step's property ``pid``: P0 (SPEC P) or a system property."""
    return SYSTEM_PROPERTIES[pid] if pid in SYSTEM_PROPERTIES else PROPERTIES[pid]


def list_literal(items: list[str]) -> str:
    """A list display of the literals ``items``, one a block, each headed by its label."""
    body = "".join(
        f"    # #{label}\n{textwrap.indent(item, '    ')},\n" for label, item in enumerate(items)
    )
    return "[\n" + body + "]"


def recorded_literal(cx: SystemCounterexample) -> str:
    """The recorded steps: the budget and the stages each request a loop reached got, each
    step headed by the lists it started from, the verdict before the last."""
    note = textwrap.wrap(f"{cx.property}: {cx.verdict}", 92)
    last = len(cx.steps) - 1
    rows = [
        _recorded_step(index, step, cx.requests, note if index == last else [])
        for index, step in enumerate(cx.steps)
    ]
    return "[\n" + "".join(rows) + "]"


def _recorded_step(
    index: int, step: SystemStep, requests: tuple[Config, ...], note: list[str]
) -> str:
    """One recorded step, headed by the lists it started from and the ``note`` lines; the
    stages of a request with encoder items (of ``requests``) show the encoder's value."""
    decoding = PHASE_NAMES[DECODING]
    listed = {decoding: PHASE_NAMES[RUNNING]}
    lists = {
        queue: [
            f"#{label}" + (" decoding" if part.queue == decoding else "")
            for label, part in sorted(enumerate(step.requests), key=lambda lp: lp[1].place)
            if listed.get(part.queue, part.queue) == queue
        ]
        for queue in PHASE_NAMES
        if queue != decoding
    }
    where = "; ".join(f"{queue} [{', '.join(labels)}]" for queue, labels in lists.items())
    stages = "".join(
        f"            {label}: {step_literal(part.stages, bool(cfg.items))},\n"
        for label, (part, cfg) in enumerate(zip(step.requests, requests, strict=True))
        if part.stages is not None
    )
    eligible = f"        eligible={step.eligible},\n" if step.eligible is not None else ""
    advances = {label: part.decoded for label, part in enumerate(step.requests) if part.decoded}
    decodes = f"        decodes={advances!r},\n" if advances else ""
    resumed = {label: part.hit for label, part in enumerate(step.requests) if part.hit is not None}
    hits = f"        hits={resumed!r},\n" if resumed else ""
    connected = tuple(label for label, part in enumerate(step.requests) if part.connector)
    if connected:  # SPEC KV2 rule 5g: a pooled file's
        hits += f"        connected={connected!r},\n"
    return (
        f"    # step {index}: {where}\n"
        + "".join(f"    # {line}\n" for line in note)
        + f"    Recorded(\n        budget={step.budget},\n{eligible}        stages={{\n{stages}"
        f"        }},\n{decodes}{hits}    ),\n"
    )


BY_LABEL: Values = {
    "step_parameters": ", label: int",
    "step_lines": "\n    label: int,",
    "step_subject": "request ``label``",
    "step_config": "CONFIGS[label]",
    "step_attributes": "REQUEST_ATTRIBUTES[label]",
}
"""``schedule_step`` of a multi-request file: on request ``label``."""

_P0 = """\
    where = f"step {index} (budget {outcome.budget})"
    for label, step in outcome.reached.items():
        problem = unsafe(step)
        if problem is not None:
            return f"P0: {where}, #{label}: {problem.removeprefix('P0: ')}"
"""
"""SPEC P0 on every request a loop reached, first in every property's check."""

CHECKS = {
    "P0": _P0 + "    return None\n",
    "HOL": _P0
    + """\
    if outcome.broke_at is None:
        return None
    head = outcome.reached[outcome.broke_at]
    for label, step in outcome.behind.items():
        if taken(step) > 0:
            return (
                f"HOL: {where}: the waiting loop breaks at {who(outcome.broke_at, head.c)}, "
                f"offered {head.budget} tokens ({head}), while {who(label, step.c)} behind it "
                f"would get a chunk of {step.chunk} from them ({step})"
            )
    return None
""",
    "S-LIVE": _P0
    + """\
    left = outcome.running + outcome.waiting
    alone = outcome.eligible == len(left)  # no eligible request beyond these
    if outcome.budget == WHOLE_BUDGET and alone and left and not outcome.scheduled:
        return (
            f"S-LIVE: {where}: offered the whole budget M={WHOLE_BUDGET}, the step schedules "
            f"nothing while {', '.join(who(label, outcome.c[label]) for label in left)} "
            "have work left: the state is its own successor, so no request progresses for ever"
        )
    return None
""",
    "STARVE": _P0
    + """\
    if outcome.scheduled:
        return None
    for label in outcome.running + outcome.waiting:
        if outcome.c[label] >= PREFILL_ENDS[label]:
            continue  # decoding: no chunk to give
        offered = offer(outcome.budget, outcome.theta)
        alone = schedule_step(vllm, scheduler, outcome.c[label], offered, label$encoder_of)
        if taken(alone) > 0:
            return (
                f"STARVE: {where}: the step schedules nothing (it repeats for ever under that "
                f"budget), while {who(label, alone.c)} alone would get a chunk of "
                f"{alone.chunk} from it ({alone})"
            )
    return None
""",
}
"""The body of the generated ``violation``: P0, then the property (module docstring), each
problem naming the property and the step."""

REQUESTS = """
# The requests' configurations (chunkproof's model, SPEC S1): request #i is CONFIGS[i].
CONFIGS = $configs

# What the real methods read: the stand-in scheduler (``self``: the requests share the engine)
# and each request, by attribute path. ``request.num_computed_tokens`` is the request's state c
# at each step. Reading any other attribute is an error naming it, so no input of the real code
# is silently defaulted.
SCHEDULER_ATTRIBUTES = $scheduler
REQUEST_ATTRIBUTES = $requests

PREFILL_ENDS = $prefill_ends  # E = max(P, T - 1) per request: it is done when c reaches E
ARRIVAL = $arrival  # the waiting queue at Init (FCFS), by request label
MAX_NUM_SEQS = $max_seqs  # max_num_seqs: the most requests the running list holds
WHOLE_BUDGET = $whole  # M = max_num_batched_tokens: the most tokens one step can offer
# What a zero does ($composition): RUNNING_ZERO in the running loop (continue: the next
# running request; break: the loop ends), in the waiting loop SPLIT_ZERO for a zero the split
# gives and LATER_ZERO for one a later stage gives (break: the loop ends, head-of-line
# blocking; skip, or continue past it: the request keeps its place in the queue)
RUNNING_ZERO = $running_zero
SPLIT_ZERO = $split_zero
LATER_ZERO = $later_zero
# From C8 (0.31) a request is offered the budget left capped by theta_eff: THETA (the static
# long_prefill_token_threshold) when two or more requests are eligible, else no cap; 0 here
# when the policy has no per-step threshold or THETA is off. With ADAPTIVE
# (long_prefill_token_threshold_adaptive), a theta_eff > 0 is raised to
# WHOLE_BUDGET // eligible where that is larger, eligible the count each step records.
THETA_PER_STEP = $theta
ADAPTIVE = $adaptive


"""

_TEST = '''class Recorded(NamedTuple):
    """One recorded schedule() step: the budget offered, the stages each request a loop
    reached got from the budget left, by request label, with ADAPTIVE the number of eligible
    requests the step counted (0: the requests here, plus one when the budget is below
    WHOLE_BUDGET), and the tokens each decoding request's decode step advanced its c."""

    budget: int
    stages: dict[int, Step]
    eligible: int = 0
    decodes: dict[int, int] = {}


$outcome# The counterexample: what $policy does, step by step.
RECORDED = $recorded


def $test_name(vllm: Extracted$test_fixtures) -> None:
    """$property: $definition."""
    scheduler = standin_tree(SCHEDULER_LABEL, SCHEDULER_ATTRIBUTES, vllm.scheduler_type)
    running, waiting = [], list(ARRIVAL)
    c = [config.start for config in CONFIGS]
    for index, recorded in enumerate(RECORDED):
        if not running and not waiting:
            return
        outcome = schedule(
            vllm,
            scheduler,
            running,
            waiting,
            c,
            recorded.budget,
            recorded.eligible$step_extra$decode_argument,
        )
        problem = violation(vllm, scheduler, index, outcome$step_extra)
        assert problem is None, f"{problem}; recorded: {recorded.stages}"
        running, waiting, c = outcome.running, outcome.waiting, outcome.c


def schedule(
    vllm: Extracted,
    scheduler: StandIn,
    running: list[int],
    waiting: list[int],
    c: list[int],
    budget: int,
    eligible: int,$encoders_parameter
) -> Outcome:
    """One schedule() step over the requests as chunkproof models it (history note 6): the
    running loop offers each running request in order the budget left and takes its chunk (a
    zero: RUNNING_ZERO) until no budget is left; the waiting loop then offers each waiting
    request in queue order the budget left while budget and a seat remain, and admits one that
    gets a chunk to the end of the running list (a zero: SPLIT_ZERO or LATER_ZERO, a skipped
    request keeping its place). A request whose step breaks P0 gets nothing.
    Each waiting request behind a break is run at the budget left (HOL). A request whose c
    reaches its E is done and leaves both lists$holds_words.
    Each request is offered the budget left capped by theta_eff (THETA_PER_STEP; ADAPTIVE:
    floored at WHOLE_BUDGET // ``eligible``, the recorded count).$encoders_words"""
    if not ADAPTIVE:
        eligible = len(running) + len(waiting) + (budget < WHOLE_BUDGET)
    theta = THETA_PER_STEP if eligible >= 2 else 0
    if ADAPTIVE and theta > 0:
        theta = max(theta, WHOLE_BUDGET // eligible)
    left, reached, decoding = budget, {}, []
    for label in running:
        if left == 0:
            break
        if c[label] >= PREFILL_ENDS[label]:
            decoding.append(label)  # its decode step: its tokens are outside the budget
            continue
        step = reached[label] = schedule_step(
            vllm, scheduler, c[label], offer(left, theta), label$encoder_of
        )
        left -= taken(step)$allocate_running
        if RUNNING_ZERO == "break" and unsafe(step) is None and step.chunk == 0:
            break
    admitted, broke_at, behind = [], None, {}
    for label in waiting:
        if broke_at is not None:
            behind[label] = schedule_step(
                vllm, scheduler, c[label], offer(left, theta), label$encoder_of
            )
            continue
        if left == 0 or len(running) + len(admitted) >= MAX_NUM_SEQS:
            break
        step = reached[label] = schedule_step(
            vllm, scheduler, c[label], offer(left, theta), label$encoder_of
        )
        if taken(step) > 0:
            admitted.append(label)
            left -= step.chunk$allocate_admitted
        elif unsafe(step) is None and (SPLIT_ZERO if step.split <= 0 else LATER_ZERO) == "break":
            broke_at = label
    after = list(c)
    for label, step in reached.items():
        after[label] += taken(step)
$advance    return Outcome(
        budget,
        eligible,
        theta,
        reached,
        broke_at,
        behind,
        left < budget or bool(decoding),
        [
            label
            for label in running + admitted
            if after[label] < PREFILL_ENDS[label]$holds
        ],
        [label for label in waiting if label not in admitted],
        after,
    )


$loop_helpers

def who(label: int, c: int) -> str:
    """A request by its label, T and c."""
    return f"#{label} (T={CONFIGS[label].tokens}, c={c})"


def violation(
    vllm: Extracted, scheduler: StandIn, index: int, outcome: Outcome$test_fixtures
) -> str | None:
    """What breaks $checked at step ``index``, if anything: "PROPERTY: step i (budget b): why"."""
$check_body
'''

OUTCOME = '''class Outcome(NamedTuple):
    """One schedule() step run here: the budget, the eligible requests and theta_eff, the
    steps of the requests the loops reached (by label, in the order reached), the waiting
    request the loop broke at on a zero (None: no break), the steps of the waiting requests
    behind it at the budget left, whether the step changed anything (a chunk, a decode step,
    a preemption), and the lists and every request's c after the step."""

    budget: int
    eligible: int
    theta: int
    reached: dict[int, Step]
    broke_at: int | None
    behind: dict[int, Step]
    scheduled: bool
    running: list[int]
    waiting: list[int]
    c: list[int]


'''
"""The record of one ``schedule()`` step a multi-request file runs, which its property checks
(:data:`CHECKS`) read."""

LOOP_HELPERS = '''def offer(left: int, theta: int) -> int:
    """The budget left, capped by theta_eff ``theta`` (0: no cap)."""
    return min(left, theta) if theta > 0 else left


def taken(step: Step) -> int:
    """The tokens a request gets from its step: its chunk, or nothing where P0 breaks."""
    return 0 if unsafe(step) is not None else step.chunk
'''
"""What the loops of a multi-request file offer a request and take from its step."""

_TEMPLATE = Template(PRELUDE + REQUESTS + STEP_CLASS + _TEST + REAL_METHODS)

_ENCODER = '''# The requests' encoders: the tree's EncoderCacheManager (one, which they
# share), Request members, PlaceholderRange and the scheduler's encoder methods, compiled from
# the source text (at the end of the file: chunkproof.source.encoder_run), driven as schedule()
# and update_from_output drive them.
ITEMS = $items_by_label  # by label: (start, length) of each item's placeholders
ENCODER_CACHE = $encoder_cache  # C: the encoder cache in embeddings
ENCODER_BUDGET = $encoder_budget  # b0: the encoder compute budget of a step
USE_EAGLE = $use_eagle  # the scheduler's use_eagle
# Where schedule() calls the encoder (before the split up to 0.27, after it from 0.28) and the
# shift_computed_tokens it passes are read from the tree's schedule().


@pytest.fixture
def encoders() -> dict[int, EncoderRun]:
    """The encoders of the requests with items, by label, at admission: one empty cache."""
    root = vllm_source_root()
    runs: dict[int, EncoderRun] = {}
    try:
        for label, items in ITEMS.items():
            runs[label] = EncoderRun(
                root,
                items,
                ENCODER_CACHE,
                ENCODER_BUDGET,
                USE_EAGLE,
                CONFIGS[label].lookahead,
                shared=next(iter(runs.values()), None),
                request_id=f"request-{label}",
            )
    except SourceError as exc:
        pytest.fail(f"cannot read the encoder code from {root}: {exc}", pytrace=False)
    return runs


def holds(encoders: dict[int, EncoderRun], label: int) -> bool:
    """Whether request ``label``'s encoder entries still reference an item (a request past
    its prefill end then decodes, in the running list, until they free it)."""
    return label in encoders and encoders[label].holds()


'''
"""The encoders of a file with requests with encoder items (a :class:`~string.Template`)."""

_ENCODER_TEMPLATE = Template(
    PRELUDE + REQUESTS + _ENCODER + STEP_CLASS + _TEST + ENCODER_STEP + REAL_REST + ENCODER_DRIVER
)

NO_ENCODER: Values = {
    "test_fixtures": "",
    "step_extra": "",
    "encoders_parameter": "",
    "encoders_words": "",
    "encoder_of": "",
    "allocate_running": "",
    "allocate_admitted": "",
    "advance": "",
    "decode_argument": "",
    "holds": "",
    "holds_words": "",
}
"""The encoder's template values in a file whose requests have no encoder items."""

_ENCODER_CALLS: Values = {
    "test_fixtures": ", encoders: dict[int, EncoderRun]",
    "step_extra": ", encoders",
    "encoders_parameter": "\n    encoders: dict[int, EncoderRun],\n    decodes: dict[int, int],",
    "encoders_words": (
        " A request with encoder items runs its\n    encoder (``encoders``, one cache): a "
        "step it takes allocates what its call scheduled\n    at once; after the step its "
        "encoder frees what it no longer needs, and all once it is done\n    (past its E with "
        "no entry referenced; ``decodes``: each decode step's tokens)."
    ),
    "encoder_of": ", encoders.get(label)",
    "allocate_running": (
        "\n        if label in encoders and taken(step) > 0:"
        "\n            encoders[label].allocate(*step.scheduled)"
    ),
    "allocate_admitted": (
        "\n            if label in encoders:"
        "\n                encoders[label].allocate(*step.scheduled)"
    ),
    "advance": (
        "    for label in decoding:\n"
        "        after[label] += decodes.get(label, 0)\n"
        "    for label in [*reached, *decoding]:\n"
        "        if label in encoders and after[label] > c[label]:\n"
        "            encoders[label].computed(after[label])\n"
        "            if after[label] >= PREFILL_ENDS[label] and not encoders[label].holds():\n"
        "                encoders[label].finished()\n"
    ),
    "decode_argument": ", recorded.decodes",
    "holds": " or holds(encoders, label)",
    "holds_words": (
        ", unless its encoder entries still\n    reference an item: it is then decoding, in the "
        "running list, where the running loop runs\n    its decode step (its tokens outside the "
        "budget), advancing its c by the recorded tokens"
    ),
}
"""... and in one with such requests: the test takes the ``encoders`` fixture and passes it
through every step; a request's encoder allocates in the loop and frees after the step."""
