"""Standalone pytest repros of a single-request counterexample (SPEC C; ``chunkproof repro FILE
--pytest OUT``), made of the pieces every model's repro shares (:mod:`.frame`).

The file reads the real methods from a vLLM source tree and calls them as the call sites do
(:data:`~chunkproof.checker.repro.frame.CALL_SITE`: at c = c0 the waiting loop passes the
admission hits, local and external, and V3's u; after, the running loop passes c). It offers the
recorded budgets step by step, then the largest budget until the prefill ends (a P7
counterexample: its ``const(b)`` at every step), and checks every step with chunkproof's own
predicates (their source is copied in too, with the budget cap of the counterexample's
composition): first SPEC P0 (the real code raised, or a stage left [0, its input]), then the
counterexample's property. Each failure names the property it breaks (``AssertionError: P1:
stuck at c=46 ...``). So the file fails on code with the bug and passes on a fix, and it cannot
drift from the model: every function in it is the one chunkproof runs. A request with encoder
items also runs its encoder under the tree's own code
(:data:`~chunkproof.checker.repro.frame.ENCODER_STEP`): the file carries
:mod:`chunkproof.source.encoder_run`, which compiles ``_try_schedule_encoder_inputs`` and the
``EncoderCacheManager`` from the source text, reads where ``schedule()`` calls the encoder, and
keeps the cache from step to step. A P6 file judges each chunk against the tree's own cache side
(:data:`RESEND`): it carries :mod:`chunkproof.source.kv_run`, which compiles the tree's KV cache
coordinator, managers and ``get_computed_blocks`` from the source text and asks them where an
identical resend of the prompt lands (R*) and whether the tree's retention keeps the state
there (SPEC KV1), so the file judges a release by its own lookup, never by another release's
rule copied from chunkproof. A P8 file runs the tree's ``allocate_slots`` over the start-up
pool (:data:`POOL`); a P3 file of a fresh prefill runs every chunk through it and fails on a
Mamba key whose block holds another state (:data:`SLOTS`, :func:`tree_judges_slots`).
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
    FunctionList,
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
from chunkproof.model.budget import Const
from chunkproof.model.config import Config
from chunkproof.model.counterexample import Counterexample
from chunkproof.model.errors import ChunkproofError
from chunkproof.source import encoder_run, kv_alloc_run, kv_run
from chunkproof.source.loading import recorded_policy
from chunkproof.spec import properties as props
from chunkproof.spec.kv_blocks import longest_model_len, pool_rules
from chunkproof.spec.slots import eagle_drop, keys_own_tail, kv_rules


def repro_source(cx: Counterexample, source_name: str) -> str:
    """The text of the standalone pytest file for ``cx`` (module docstring). With encoder
    items the file also runs the request's encoder under the tree's real code
    (:data:`_ENCODER`); a P6 file asks the tree's own KV cache code for R* (:data:`RESEND`)."""
    cfg = cx.config
    cache = cache_side(cx)
    docstring = file_docstring(cx, (cfg,), title(cx), offered(cx), source_name, cache)
    values = trace_values(cx, source_name, cache) | {"docstring": docstring}
    policy = recorded_policy(cx)
    carried: list[str] = []
    if cfg.items:
        imports, driver = module_source(encoder_run)
        carried += imports
        values |= encoder_values(cfg) | {"encoder_run": driver}
    if cache:
        imports, driver = module_source(kv_run)
        carried += imports
        values |= {"kv_run": driver, "kv_use_eagle": repr(eagle_drop(cfg))}
    if cache in ("P3", "P8"):
        imports, driver = module_source(kv_alloc_run)
        carried += imports
        values["kv_alloc_run"] = driver
    if cache == "P3":
        values["slot_blocks"] = str(4 * cfg.prompt + 64)
    if cache == "P8":
        rules = pool_rules(policy.kv_release)
        values |= {
            "pool_blocks": str(rules.startup_pool(cfg)),
            "pool_releases": rules.releases,
            "max_model_len": str(longest_model_len(cfg)),
        }
    methods = real_methods(policy, predicates(cx, cache), carried)
    return _TEMPLATES[bool(cfg.items), cache].substitute(values | methods)


def cache_side(cx: Counterexample) -> str:
    """The tree's cache side a standalone file runs: "P6" (its lookup), "P8" (its block
    allocation), "P3" (its Mamba keys and block tables, where :func:`tree_judges_slots`), else
    none. The short form (:mod:`.vllm_style`) runs none: it judges P3 by chunkproof's
    predicate, and refuses P6 and P8."""
    if cx.property in ("P6", "P8"):
        return cx.property
    if cx.property == "P3" and tree_judges_slots(cx.config):
        return "P3"
    return ""


def tree_judges_slots(cfg: Config) -> bool:
    """Whether a P3 file judges its chunks by the state each of the tree's Mamba keys names
    and its block holds (:data:`SLOTS`): a fresh prefill of the prompt (c0 = 0, no external
    or junction hit, no uncached prefix, T = P) without encoder items, internal checkpoints
    only without partial hits. These are the prefills on which ``tests/test_kv_resend_fidelity.py``
    checks the slot oracle against every release's tree (:class:`~chunkproof.source.
    kv_alloc_run.TreeSlots`); outside them the file judges by chunkproof's predicate."""
    fresh = cfg.start == 0 and cfg.external == 0 and cfg.junction == 0
    plain = cfg.uncached_prefix == 0 and cfg.tokens == cfg.prompt and not cfg.items
    return fresh and plain and not (cfg.checkpoints and cfg.partial_hits)


def title(cx: Counterexample) -> str:
    """What breaks where, for the file's first line."""
    rule = props.PROPERTIES[cx.property]
    return f"{cx.property} {rule.name} breaks on {cx.policy} ({cx.config.describe()})"


def trace_values(cx: Counterexample, source_name: str, cache: str = "") -> Values:
    """The values of :data:`TEST` for ``cx`` (read from ``source_name``): its configuration,
    the stand-ins' attributes, the recorded steps, the test's budgets and its check, with the
    tree's ``cache`` side (:func:`cache_side`) where the file runs one."""
    cfg = cx.config
    scheduler, request = standins(cx, cfg, source_name)
    name = props.PROPERTIES[cx.property].name.lower().replace("-", "_")
    values = {
        "config": config_literal(cfg),
        "scheduler": dict_literal(scheduler),
        "request": dict_literal(request),
        "prefill_end": str(cfg.prefill_end),
        "largest": str(cx.largest_budget()),
        "policy": one_line(cx.policy),
        "recorded": _recorded_literal(cx),
        "property": cx.property,
        "test_name": f"test_{cx.property.lower()}_{name}",
        "definition": _definition(props.PROPERTIES[cx.property]),
        "check_body": _check(cx, cache),
        "checked": "P0" if cx.property == "P0" else f"{cx.property} (or P0)",
        "budgets": _budgets(cx),
    }
    values |= _ONE_REQUEST | (_ENCODER_CALLS if cfg.items else _NO_ENCODER)
    if cx.property == "P6":
        values["test_fixtures"] += ", resend: TreeResend"
        values["check_extra"] = ", resend"
    if cx.property == "P8":
        values["test_fixtures"] += ", pool: TreeAllocator"
        values["check_extra"] = ", pool"
    if cache == "P3":
        values["test_fixtures"] += ", slots: TreeSlots"
        values["check_extra"] = ", slots"
    return values


def _budgets(cx: Counterexample) -> str:
    """The budgets the test offers (SPEC S4): a P7 counterexample's ``const(b)`` at every step,
    else the recorded budgets, then the largest budget until the prefill ends."""
    if cx.property == "P7":
        return f"[{_const_budget(cx)}] * (PREFILL_END + 1)"
    return "[s.budget for s in RECORDED] + [LARGEST_BUDGET] * (PREFILL_END + 1)"


def _const_budget(cx: Counterexample) -> int:
    """b of a P7 counterexample's ``const(b)`` (the last step's budget in a file without it)."""
    model = cx.budget_model
    return model.budget if isinstance(model, Const) else cx.steps[-1].budget


def predicates(cx: Counterexample, cache: str = "") -> FunctionList:
    """chunkproof's predicate of the property (SPEC P), as the trace check calls it (P0 needs
    none: the stages' ranges and the crash are checked on every step; P8, and P3 where the file
    runs the tree's ``cache`` side, are judged by the tree)."""
    pid = cx.property
    if pid == "P0":
        return []
    if pid in props.STUCK_PROPERTIES:
        return [props.stuck]
    if pid == "P6":  # the checkpoint the chunk leaves live, the tail its own copy keys
        rules = kv_rules(recorded_policy(cx).kv_release)
        tail = [keys_own_tail] if rules.grid_tail else []
        return [props.misses_resend, rules.live_checkpoint, *tail]
    if pid == "P8" or cache == "P3":
        return []  # the tree's own cache judges it (:data:`_POOL_CHECK`, :data:`_SLOTS_CHECK`)
    if pid in props.EDGE_PROPERTIES:
        return [props.edge_properties(recorded_policy(cx))[pid]]  # P4: the release's tail
    if pid == "P5":
        return [props.WINDOW_PROPERTIES[cx.window()]]
    raise ChunkproofError(f"no repro for property {pid}")


def _definition(rule: props.Property) -> str:
    """A property's definition, then what its environment fixes (where it fixes anything)."""
    return f"{rule.definition}; {rule.environment}" if rule.environment else rule.definition


def _check(cx: Counterexample, cache: str) -> str:
    """The body of the generated ``violation(vllm, scheduler, step)``: SPEC P per property.

    Every step is checked for P0 first (:data:`_SAFETY`: the real code raised, or a stage left
    [0, its input]), whatever the property; each problem names the property it breaks. P1/P2:
    the largest budget yields 0 at c; P7: the ``const(b)`` step yields 0 at c < E (the state
    never changes, so the run never finishes); P3-P5: chunkproof's predicate of the chunk, or
    for P3 where the file runs the tree's ``cache`` side the tree's own Mamba keys
    (:data:`_SLOTS_CHECK`); P6: chunkproof's predicate of the chunk at the R* and retention of
    the tree's own cache code (:data:`_RESEND_CHECK`); P8: the tree's allocation
    (:data:`_POOL_CHECK`).
    """
    pid = cx.property
    extra = ", encoder" if cx.config.items else ""
    if pid == "P0":
        return "    return unsafe(step)\n"
    if pid == "P7":
        return _SAFETY + (
            "    if stuck(CONFIG, step.c, step.chunk):\n"
            "        return (\n"
            '            f"P7: const({step.budget}) never finishes: at c={step.c} < "\n'
            '            f"E={PREFILL_END} the step yields 0 ({step}); c, T and the flags "\n'
            '            "never change"\n'
            "        )\n"
            "    return None\n"
        )
    if pid in props.STUCK_PROPERTIES:
        return _SAFETY + (
            "    largest = schedule_step(vllm, scheduler, step.c, LARGEST_BUDGET"
            f"{extra})\n"
            "    problem = unsafe(largest)\n"
            "    if problem is not None:\n"
            "        return problem\n"
            "    if stuck(CONFIG, step.c, largest.chunk):\n"
            "        return (\n"
            f'            f"{pid}: stuck at c={{step.c}} < E={{PREFILL_END}}: even the largest "\n'
            '            f"budget, {LARGEST_BUDGET}, yields 0 ({largest}); c, T and the flags "\n'
            '            "never change"\n'
            "        )\n"
            "    return None\n"
        )
    if pid == "P6":
        functions = predicates(cx, cache)
        check = _RESEND_CHECK.replace("LIVE_CHECKPOINT", functions[1].__name__)
        tail = len(functions) > 2  # the release keys its tail by its own copy (0.32 on)
        line = "    tail = keys_own_tail(CONFIG, step.c, step.end)  # whatever the mask\n"
        check = check.replace("TAIL_LINE", line if tail else "")
        return _SAFETY + check.replace(" TAIL_KEPT", " or tail" if tail else "")
    if pid == "P8":
        return _SAFETY + _POOL_CHECK
    if cache == "P3":
        return _SAFETY + _SLOTS_CHECK
    predicate = predicates(cx, cache)[0].__name__
    args = "CONFIG, step.c, step.n, step.end" if pid == "P5" else "CONFIG, step.c, step.end"
    rule = props.PROPERTIES[pid]
    exempt = " and not encoder_forced(step)" if pid == "P4" and cx.config.items else ""
    return _SAFETY + (
        f"    if step.chunk > 0 and {predicate}({args}){exempt}:\n"
        "        return (\n"
        f'            f"{pid}: chunk [{{step.c}}, {{step.end}}) breaks {pid} {rule.name} "\n'
        f'            f"({rule.definition}): {{step}}"\n'
        "        )\n"
        "    return None\n"
    )


_SAFETY = """\
    problem = unsafe(step)
    if problem is not None:
        return problem
"""
"""P0 on the step itself, first in every property's check."""


_RESEND_CHECK = """\
    position = resend.position
    live = LIVE_CHECKPOINT(CONFIG, step.c, step.end)
TAIL_LINE    kept = resend.kept TAIL_KEPT
    if step.chunk > 0 and misses_resend(CONFIG, step.c, step.end, position, kept, live):
        how = (
            "runs over it"
            if step.c < position < step.end
            else "ends there and the tree's retention drops the state"
        )
        return (
            f"P6: chunk [{step.c}, {step.end}) breaks P6 COVER: the tree's KV cache lookup "
            f"resends the prompt to R*={position}, and the chunk {how}: {step}"
        )
    sibling = resend.junction
    if step.chunk > 0 and misses_resend(
        CONFIG, step.c, step.end, sibling, resend.junction_kept TAIL_KEPT, live
    ):
        how = (
            "runs over it"
            if step.c < sibling < step.end
            else "ends there and the tree's retention drops the state"
        )
        return (
            f"P6: chunk [{step.c}, {step.end}) breaks P6 COVER (S-COVER): a sibling sharing "
            f"the first J={CONFIG.junction} tokens lands at R*_J={sibling} in the tree's KV "
            f"cache, and the chunk {how}: {step}"
        )
    return None
"""
"""SPEC P6 of a step at the tree's own R* and R*_J (S-COVER) and their retention (the
``resend`` fixture): chunkproof's :func:`~chunkproof.spec.properties.misses_resend`, given the
tree's answers, the checkpoint the chunk leaves live under the release's rules
(``LIVE_CHECKPOINT``: the release's ``KvRules.live_checkpoint``) and, from 0.32
(``KvRules.grid_tail``), whether the chunk keys the prompt's tail by its own copy whatever the
mask (``TAIL_LINE`` and ``TAIL_KEPT``: :func:`~chunkproof.spec.slots.keys_own_tail`, else
nothing)."""


_POOL_CHECK = """\
    if step.chunk > 0:
        got = pool.allocate(step.chunk)
        if got.raised:
            return (
                f"P8: chunk [{step.c}, {step.end}) breaks P8 POOL: the tree's allocate_slots "
                f"counts enough free blocks, then takes more and the pool raises "
                f"({got.raised}), in a pool of {POOL_BLOCKS} blocks, the fewest "
                f"{POOL_RELEASES}'s start-up check accepts for max_model_len={MAX_MODEL_LEN}: "
                f"{step}"
            )
        if not got.granted:
            return (
                f"P8: chunk [{step.c}, {step.end}) breaks P8 POOL: the tree's allocate_slots "
                f"refuses its KV blocks with {got.free} of {POOL_BLOCKS} blocks free, the fewest "
                f"{POOL_RELEASES}'s start-up check accepts for max_model_len={MAX_MODEL_LEN}: "
                f"{step}"
            )
    return None
"""
"""SPEC P8 of a step under the tree's own ``allocate_slots`` (the ``pool`` fixture): a refusal,
or the pool's error where the manager counted fewer blocks than it takes (KV2 rule 2e)."""


_SLOTS_CHECK = """\
    if step.chunk > 0:
        slots.compute(step.chunk)
        wrong = slots.poisoned()
        if wrong:
            keys = ", ".join(
                f"{key} onto a block holding {'no state' if held < 0 else f'state@{held}'}"
                for key, held in wrong.items()
            )
            return (
                f"P3: chunk [{step.c}, {step.end}) breaks P3 NOCROSS: the tree's cache keys "
                f"{keys}: {step}"
            )
    return None
"""
"""SPEC P3 of a step under the tree's own cache (the ``slots`` fixture): after the chunk, every
Mamba key the tree's cache holds names the state its block holds."""


def offered(cx: Counterexample) -> str:
    """The docstring's words on the budgets offered and what is asserted."""
    checked = "P0" if cx.property == "P0" else f"P0 and {cx.property}"
    if cx.property == "P7":
        return (
            f"the counterexample's budget model, const({_const_budget(cx)}), at every step, and "
            f"asserts {checked}"
        )
    return (
        "the counterexample's budgets step by step, then the largest budget until the prefill "
        f"ends, and asserts {checked}"
    )


def _recorded_literal(cx: Counterexample) -> str:
    items = bool(cx.config.items)
    rows = [f"    {step_literal(s, items)}," for s in cx.steps]
    note = textwrap.wrap(f"{cx.property}: {cx.verdict}", 92)
    rows[-1:-1] = ["    # " + line for line in note]
    return "[\n" + "\n".join(rows) + "\n]"


_CONFIGURATION = """
# The configuration (chunkproof's model, SPEC S1).
CONFIG = $config

# What the real methods read: the stand-in scheduler (``self``) and request, by attribute path.
# ``request.num_computed_tokens`` is the state c of each step. Reading any other attribute is an
# error naming it, so no input of the real code is silently defaulted.
SCHEDULER_ATTRIBUTES = $scheduler
REQUEST_ATTRIBUTES = $request

PREFILL_END = $prefill_end  # E = max(P, T - 1): the prefill is done when c reaches E
LARGEST_BUDGET = $largest  # the most tokens one step can offer


"""


_TEST = '''# The counterexample: what $policy does, step by step.
RECORDED = $recorded


def $test_name(vllm: Extracted$test_fixtures) -> None:
    """$property: $definition."""
    scheduler = standin_tree(SCHEDULER_LABEL, SCHEDULER_ATTRIBUTES, vllm.scheduler_type)
    budgets = $budgets
    c, path = CONFIG.start, []
    for budget in budgets:
        if c >= PREFILL_END:
            return
        step = schedule_step(vllm, scheduler, c, budget$step_extra)
        path.append(step)
        problem = violation(vllm, scheduler, step$step_extra$check_extra)
        assert problem is None, f"{problem}; steps: {path}"
$advance        c = step.end
    pytest.fail(f"the prefill does not finish: c={c} < E={PREFILL_END}; steps: {path}")


def violation(vllm: Extracted, scheduler: StandIn, step: Step$test_fixtures) -> str | None:
    """What breaks $checked at this step, if anything: "Pn: why"."""
$check_body
'''


TEST = _CONFIGURATION + STEP_CLASS + _TEST
"""A single-request file's configuration, ``Step`` record and test (a :class:`~string.Template`
piece: :func:`trace_values`)."""

_TEMPLATE = Template(PRELUDE + TEST + REAL_METHODS)


ENCODER_CONSTANTS = """# The request's encoder: the tree's EncoderCacheManager, Request members,
# PlaceholderRange and the scheduler's encoder methods, compiled from the source text (at the
# end of the file: chunkproof.source.encoder_run), driven as schedule() and update_from_output
# drive them.
ITEMS = $items  # (start, length) of each item's placeholders
ENCODER_CACHE = $encoder_cache  # C: the encoder cache in embeddings
ENCODER_BUDGET = $encoder_budget  # b0: the encoder compute budget of a step
USE_EAGLE = $use_eagle  # the scheduler's use_eagle
# Where schedule() calls the encoder (before the split up to 0.27, after it from 0.28) and the
# shift_computed_tokens it passes are read from the tree's schedule().
"""
"""What a file says of the request with encoder items (a :class:`~string.Template` piece)."""


_ENCODER = (
    ENCODER_CONSTANTS
    + '''

@pytest.fixture
def encoder() -> EncoderRun:
    """The request's encoder at admission: an empty cache."""
    root = vllm_source_root()
    try:
        return EncoderRun(root, ITEMS, ENCODER_CACHE, ENCODER_BUDGET, USE_EAGLE, CONFIG.lookahead)
    except SourceError as exc:
        pytest.fail(f"cannot read the encoder code from {root}: {exc}", pytrace=False)


'''
)
"""The encoder of a file whose request has encoder items (a :class:`~string.Template`)."""


_ADVANCE = """\
        if step.chunk > 0:
            encoder.advance(*step.scheduled, step.end)
"""
"""What the test does after a step the request took: the encoder allocates what it scheduled
and frees what the request no longer needs."""


_ENCODER_TEMPLATE = Template(
    PRELUDE
    + _CONFIGURATION
    + _ENCODER
    + STEP_CLASS
    + _TEST
    + ENCODER_STEP
    + REAL_REST
    + ENCODER_DRIVER
)


_NO_ENCODER = {"step_extra": "", "test_fixtures": "", "advance": "", "check_extra": ""}
"""The encoder's template values in a file whose request has no encoder items."""


_ENCODER_CALLS = {
    "step_extra": ", encoder",
    "test_fixtures": ", encoder: EncoderRun",
    "advance": _ADVANCE,
    "check_extra": "",
}
"""... and in one whose request has them: the test takes the ``encoder`` fixture, passes it
to every step and advances it after a step the request takes."""


_ONE_REQUEST = {
    "step_parameters": "",
    "step_lines": "",
    "step_subject": "this request",
    "step_config": "CONFIG",
    "step_attributes": "REQUEST_ATTRIBUTES",
}
"""``schedule_step`` of a single-request file: on the one ``CONFIG``."""


RESEND = '''
# The cache side (SPEC KV1): where an identical resend of the prompt lands (R*) and whether the
# tree's retention keeps the state there come from the tree's own KV cache code (at the end of
# the file: chunkproof.source.kv_run): its coordinator, managers and get_computed_blocks,
# compiled from the source text and built as the scheduler builds them for CONFIG.
KV_USE_EAGLE = $kv_use_eagle  # the scheduler's use_eagle: D, off under hash lookahead L_h


@pytest.fixture(scope="module")
def resend() -> TreeResend:
    """R* (the hit an identical resend gets when every state of the prompt is cached) and its
    retention, under the tree's own KV cache code."""
    root = vllm_source_root()
    try:
        found = tree_resend(root, CONFIG, KV_USE_EAGLE)
    except SourceError as exc:
        pytest.fail(f"cannot run the KV cache code of {root}: {exc}", pytrace=False)
    if found.fine_hits != CONFIG.partial_hits:
        pytest.fail(
            f"the KV cache code of {root} turns fine hits {'on' if found.fine_hits else 'off'}, "
            f"the counterexample's configuration has partial_hits={CONFIG.partial_hits}",
            pytrace=False,
        )
    return found


'''
"""The fixture of a P6 file: the tree's R* and retention (a :class:`~string.Template` piece)."""


POOL = '''
# The cache side (SPEC KV2): the KV blocks each chunk asks for come from the tree's own
# KVCacheManager.allocate_slots (at the end of the file: chunkproof.source.kv_alloc_run), compiled
# from the source text and asked chunk by chunk as schedule() asks it, over a pool of the fewest
# blocks the release's start-up check accepts for max_model_len = P + 1, the least a generating
# request of P tokens needs (chunkproof's reading of that check, SPEC KV2 rule 4).
KV_USE_EAGLE = $kv_use_eagle  # the manager's use_eagle: D, off under hash lookahead L_h
POOL_BLOCKS = $pool_blocks
POOL_RELEASES = "$pool_releases"
MAX_MODEL_LEN = $max_model_len


@pytest.fixture
def pool() -> TreeAllocator:
    """The request's KV blocks under the tree's own manager, from c0 (a local hit seeded by
    an identical request's prefill, an external one loaded with the first chunk)."""
    root = vllm_source_root()
    try:
        return TreeAllocator(root, CONFIG, KV_USE_EAGLE, POOL_BLOCKS, MAX_MODEL_LEN)
    except SourceError as exc:
        pytest.fail(f"cannot run the KV cache code of {root}: {exc}", pytrace=False)


'''
"""The fixture of a P8 file: the tree's allocation over the start-up minimum pool (a
:class:`~string.Template` piece)."""


SLOTS = '''
# The cache side (SPEC KV1, P3): which Mamba keys the cache holds after each chunk, and which
# state each key's block holds, come from the tree's own KVCacheManager.allocate_slots (at the
# end of the file: chunkproof.source.kv_alloc_run), compiled from the source text and asked
# chunk by chunk as schedule() asks it, over a pool large enough never to refuse. The kernel's
# write is the one rule not read from the tree (chunkproof.source.kv_alloc_run.TreeSlots).
KV_USE_EAGLE = $kv_use_eagle  # the manager's use_eagle: D, off under hash lookahead L_h
SLOT_BLOCKS = $slot_blocks


@pytest.fixture
def slots() -> TreeSlots:
    """The request's prefill under the tree's own manager, from c = 0."""
    root = vllm_source_root()
    try:
        return TreeSlots(root, CONFIG, KV_USE_EAGLE, SLOT_BLOCKS)
    except SourceError as exc:
        pytest.fail(f"cannot run the KV cache code of {root}: {exc}", pytrace=False)


'''
"""The fixture of a P3 file the tree judges (a :class:`~string.Template` piece)."""


POOL_DRIVER = """

$kv_alloc_run"""
"""The end of a P3 or P8 file, after :data:`KV_DRIVER`: :mod:`chunkproof.source.kv_alloc_run`."""


KV_DRIVER = """


# ---------------------------------------------------------------------------------------------
# chunkproof's KV cache driver (chunkproof.source.kv_run, verbatim).
# ---------------------------------------------------------------------------------------------

$kv_run"""
"""The end of a P6 file: :mod:`chunkproof.source.kv_run`."""


_TEMPLATES = {
    (False, ""): _TEMPLATE,
    (True, ""): _ENCODER_TEMPLATE,
    (False, "P6"): Template(
        PRELUDE + _CONFIGURATION + RESEND + STEP_CLASS + _TEST + REAL_METHODS + KV_DRIVER
    ),
    (False, "P3"): Template(
        PRELUDE
        + _CONFIGURATION
        + SLOTS
        + STEP_CLASS
        + _TEST
        + REAL_METHODS
        + KV_DRIVER
        + POOL_DRIVER
    ),
    (False, "P8"): Template(
        PRELUDE
        + _CONFIGURATION
        + POOL
        + STEP_CLASS
        + _TEST
        + REAL_METHODS
        + KV_DRIVER
        + POOL_DRIVER
    ),
    (True, "P8"): Template(
        PRELUDE
        + _CONFIGURATION
        + _ENCODER
        + POOL
        + STEP_CLASS
        + _TEST
        + ENCODER_STEP
        + REAL_REST
        + ENCODER_DRIVER
        + KV_DRIVER
        + POOL_DRIVER
    ),
    (True, "P6"): Template(
        PRELUDE
        + _CONFIGURATION
        + _ENCODER
        + RESEND
        + STEP_CLASS
        + _TEST
        + ENCODER_STEP
        + REAL_REST
        + ENCODER_DRIVER
        + KV_DRIVER
    ),
}
"""The file's template by (encoder items, the cache side it runs: P3, P6 or P8, or none)."""
