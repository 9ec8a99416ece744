"""Constructs of real scheduler forks that chunkproof reads as written (SPEC X2, X4, Q1), or
refuses in one line naming the construct and what to do instead.

Each construct has a fixture written for the project (``tests/fixtures/forks/``, never
third-party code): a call with arguments given with ``--set``, ``float("inf")``, starred
arguments, a patch built inside ``apply()`` behind ``if`` tests decided at import, an
``AsyncScheduler`` base the release cache lacks, a module that also patches other classes,
an ``__init__`` that sets a flag the model holds, and a ``schedule()`` that runs its own
loops and calls the base's. The fork tests read vLLM 0.33.0's cached source, so they carry
the ``fidelity`` marker; the interpreter tests of ``float("inf")`` and starred arguments run
the three forms (concrete, vectorised, Z3) on files written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from cli_helpers import Cli

from chunkproof.model.concrete import run as concrete
from chunkproof.model.errors import SubsetError
from chunkproof.model.symbolic import symbolic
from chunkproof.model.vectorised import evaluate
from chunkproof.source.functions import read_function
from chunkproof.source.loading import resolve_policy
from chunkproof.source.methods import parse_overrides

FORKS = Path(__file__).parent / "fixtures" / "forks"
BASE = ["--base", "vllm==0.33.0"]
RANGES = ["--block", "4,8", "--lookahead", "0-3", "--prompt", "1-16", "--max-sched", "1-8"]
ONE = ["--block", "4", "--prompt", "40", "--budget", "16"]
"""One request's trace, for the runs that are refused."""
LAYERS = "self.model_config.get_num_layers_by_block_type"
fidelity = pytest.mark.fidelity


def fixture(name: str) -> str:
    return str(FORKS / f"{name}.py")


def trace(cli: Cli, policy: str, *options: str, prompt: int = 40, budget: int = 64) -> Any:
    """``trace`` of one request on block 4 without lookahead; the chunks' ends."""
    run = cli(
        "trace",
        policy,
        *options,
        "--block",
        "4",
        "--prompt",
        str(prompt),
        "--budget",
        str(budget),
        "--json",
    )
    assert run.code in (0, 1), run.err
    return run.json()["ends"]


def verdicts(cli: Cli, out: Path, policy: str, *options: str) -> list[dict[str, Any]]:
    """``explore POLICY`` on :data:`RANGES`: status and counts of each property."""
    run = cli("explore", policy, *options, *RANGES, "--out", str(out), "--jobs", "1", "--json")
    assert run.code in (0, 1), run.err
    return [
        {
            k: v
            for k, v in verdict.items()
            if k in ("property", "status", "violating_configs", "configs")
        }
        for verdict in run.json()["verdicts"]
    ]


def one_error(cli: Cli, *argv: str) -> str:
    """A run refused with exit 2 and one line on stderr; that line."""
    run = cli(*argv)
    assert (run.code, run.out, run.err.count("\n")) == (2, "", 1), run.err
    return run.err


# --- a call with arguments, given with --set ---------------------------------------------------


def test_a_call_with_arguments_is_set_by_its_name() -> None:
    """``PATH(ARGS)=VALUE`` sets the call whatever its arguments; ARGS must be well formed."""
    for text in (f"{LAYERS}(parallel, 'mamba')=2", f"{LAYERS}(...)=2", f"{LAYERS}()=2"):
        assert parse_overrides([text]) == ((f"{LAYERS}()", 2),)
    assert parse_overrides(["self.x='a=(b)'"]) == (("self.x", "a=(b)"),)


@fidelity
def test_a_call_with_arguments_loads_with_its_value(cli: Cli) -> None:
    """Without a value, one error names the call; with ``--set`` (any argument text) the split
    cuts to the grid of 2 layers x 4 tokens, and the argument ``self.parallel_config``, an
    object passed along, needs no value."""
    policy = fixture("layer_count_split")
    err = one_error(cli, "trace", policy, *BASE, *ONE)
    assert f"{LAYERS}()" in err
    for given in (f"{LAYERS}(self.parallel_config, 'mamba')=2", f"{LAYERS}()=2"):
        assert trace(cli, policy, *BASE, "--set", given, budget=20) == [16, 32, 40]


# --- float("inf") --------------------------------------------------------------------------------

INFINITE = """\
def split(c, n):
    limit = float("inf")
    low = -float("inf")
    if c < limit and not (c > limit) and limit != c and low < c and limit == float(" Inf "):
        return min(n, limit, c + 9) - max(low, 0)
    return 1 // 0


def capped(c, n):
    some = min((x for x in (c, n, 5) if x > 4), default=float("inf"))
    none = max((x for x in () if x), default=-float("inf"))
    return min(some, -none, n + 20) - max(none, c)
"""


@pytest.mark.parametrize("name", ["split", "capped"])
def test_infinity_is_exact_in_every_form(tmp_path: Path, name: str) -> None:
    """Orderings with an infinity, ``min``/``max`` over it and a generator's infinite
    default give Python's values in the concrete, vectorised and Z3 forms, with no crash."""
    path = tmp_path / "infinite.py"
    path.write_text(INFINITE)
    tree = read_function(path, name)
    points = [(c, n) for c in range(-3, 12) for n in range(0, 12)]
    namespace: dict[str, Any] = {}
    exec(compile(INFINITE, str(path), "exec"), namespace)  # the test's own text, as Python runs it
    cs, ns = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    lanes = np.broadcast_to(evaluate(tree, [cs, ns]).value, cs.shape)
    c, n = z3.Ints("c n")
    term, crash = symbolic(tree, [c, n])
    for i, (cv, nv) in enumerate(points):
        expected = namespace[name](cv, nv)
        assert concrete(tree, [cv, nv]).value == expected
        assert lanes[i] == expected
        values = [(c, z3.IntVal(cv)), (n, z3.IntVal(nv))]
        assert at(term, values) == expected
        assert at(crash, values) is False


def at(term: Any, values: list[Any]) -> Any:
    """A Z3 form (or a plain value it folded to) at a point, as a Python value."""
    if not z3.is_expr(term):
        return term
    value = z3.simplify(z3.substitute(term, *values))
    return value.as_long() if z3.is_int_value(value) else z3.is_true(value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('return n + float("inf")', 'applied to float("inf")'),
        ('return max(n, float("inf"))', 'returns float("inf"), not an integer'),
        ('return float("nan")', 'float("inf") and float("-inf") are its only floats'),
        ('return min(n, float("inf") if n > 2 else c)', "on some lanes"),
        ('return min(n, min((x for x in (c,) if x > 1), default=float("inf")))', "on some lanes"),
    ],
)
def test_infinity_outside_exact_uses_is_one_error(tmp_path: Path, body: str, message: str) -> None:
    """Arithmetic on an infinity, returning it, another float, and a value infinite on some
    lanes only are errors naming the line, in the vectorised form (lanes differ)."""
    path = tmp_path / "infinite.py"
    path.write_text(f"def split(c, n):\n    {body}\n")
    tree = read_function(path, "split")
    with pytest.raises(SubsetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(tree, [np.arange(4), np.arange(4) + 1])


@fidelity
def test_a_split_with_an_infinite_default_loads(cli: Cli) -> None:
    """``_clip(n, limit=float("inf"))`` keeps n: the split floors a chunk that does not finish
    the request to its block, as the release's plain block split does."""
    assert trace(cli, fixture("infinite_threshold"), *BASE, budget=10) == [8, 16, 24, 32, 40]


# --- starred arguments ----------------------------------------------------------------------------


def test_starred_arguments_spread_a_tuple(tmp_path: Path) -> None:
    """``f(*xs)`` and ``min(*xs)`` spread a tuple; spreading a number is an error."""
    path = tmp_path / "starred.py"
    path.write_text(
        "def add(a, b, c):\n    return a + b * c\n\n\n"
        "def split(c, n):\n    both = (c, n)\n    return add(1, *both) + min(*both, 5)\n\n\n"
        "def bad(c, n):\n    return min(*c)\n"
    )
    tree = read_function(path, "split")
    assert concrete(tree, [3, 7]).value == 1 + 3 * 7 + 3
    assert concrete(tree, [9, 7]).value == 1 + 9 * 7 + 5
    with pytest.raises(SubsetError, match=r"starred.py:11: \*c spreads an integer"):
        concrete(read_function(path, "bad"), [1, 2])


@fidelity
def test_a_split_with_starred_arguments_loads(cli: Cli) -> None:
    """The fixture's split floors a chunk that does not finish the request to its block."""
    assert trace(cli, fixture("starred_split"), *BASE, budget=10) == [8, 16, 24, 32, 40]


# --- a patch built in apply() behind if tests decided at import -----------------------------------


@fidelity
def test_a_patch_built_behind_decided_ifs_is_applied(tmp_path: Path, cli: Cli) -> None:
    """apply() patches the split behind ``if not FLAG: return`` and ``if NAME == "x" and
    not OTHER``: verdicts as the same wrapper applied at module level; with the flag off the
    module patches nothing (one error)."""
    guarded = FORKS / "guarded_apply_patch.py"
    text = guarded.read_text()
    policy = resolve_policy(str(guarded), base="vllm==0.33.0")
    assert "split _split" in policy.summary
    plain = tmp_path / "plain_patch.py"
    body = text[text.index("        original = ") : text.index("    else:")]
    header = "from vllm.v1.core.sched.scheduler import Scheduler\n\n"
    plain.write_text(header + "\n".join(line[8:] for line in body.splitlines()) + "\n")
    assert verdicts(cli, tmp_path / "a", str(guarded), *BASE) == verdicts(
        cli, tmp_path / "b", str(plain), *BASE
    )
    off = tmp_path / "off_patch.py"
    off.write_text(text.replace("PATCH_SPLIT = True", "PATCH_SPLIT = False"))
    err = one_error(cli, "trace", str(off), *BASE, *ONE)
    assert "neither patches a scheduler class" in err


# --- an AsyncScheduler base the release cache lacks -----------------------------------------------


@fidelity
def test_async_scheduler_base_reads_as_scheduler(tmp_path: Path, cli: Cli) -> None:
    """On vLLM 0.33.0's cache, ``AsyncScheduler`` is Scheduler without its own members (the
    summary says so): verdicts as the same class deriving from Scheduler; a split that reaches
    one of AsyncScheduler's own members is one error naming it."""
    policy = fixture("async_device_scheduler")
    loaded = resolve_policy(policy, base="vllm==0.33.0")
    assert "AsyncScheduler read as Scheduler (in vLLM 0.33.0 it defines only" in loaded.summary
    text = Path(policy).read_text()
    plain = tmp_path / "plain_scheduler.py"
    plain.write_text(
        text.replace("async_scheduler import AsyncScheduler", "scheduler import Scheduler").replace(
            "(AsyncScheduler)", "(Scheduler)"
        )
    )
    assert verdicts(cli, tmp_path / "a", policy, *BASE) == verdicts(
        cli, tmp_path / "b", str(plain), *BASE
    )
    reaching = tmp_path / "reaching.py"
    call = "return self._update_after_schedule(num_new_tokens)"
    reaching.write_text(text.replace("return num_new_tokens // 8 * 8", call))
    err = one_error(cli, "trace", str(reaching), *BASE, *ONE)
    assert "_update_after_schedule is defined in vllm/v1/core/sched/async_scheduler.py" in err


# --- a module that also patches other classes -----------------------------------------------------


@fidelity
def test_patches_of_other_classes_are_not_the_policy(cli: Cli) -> None:
    """A module patching an engine class, a cache manager and a class of its own besides the
    Scheduler: the Scheduler's patch is the policy (whole blocks)."""
    policy = fixture("engine_and_scheduler_patch")
    loaded = resolve_policy(policy, base="vllm==0.33.0")
    assert "class Scheduler on vLLM 0.33.0" in loaded.summary
    assert "split _whole_blocks" in loaded.summary
    assert trace(cli, policy, *BASE, budget=10) == [8, 16, 24, 32, 40]


# --- an __init__ that sets a flag the model holds -------------------------------------------------


@fidelity
@pytest.mark.parametrize(
    ("name", "line", "message"),
    [
        ("init_flag_scheduler", 14, "sets self.need_mamba_block_aligned_split, the flag"),
        ("init_flag_patch", 16, "sets self.num_prefill_lookahead, which the model holds"),
    ],
)
def test_an_init_setting_a_modelled_flag_is_one_error(
    cli: Cli, name: str, line: int, message: str
) -> None:
    """A subclass's ``__init__`` or a patched one that sets an attribute the model holds is
    named with its line, never silently replaced by the model's value."""
    err = one_error(cli, "trace", fixture(name), *BASE, *ONE)
    assert f"{fixture(name)}:{line}: __init__ {message}" in err


@fidelity
def test_an_init_setting_other_attributes_loads(tmp_path: Path, cli: Cli) -> None:
    """An ``__init__`` that sets only attributes the model does not hold is not an error: the
    class runs as the release does."""
    text = Path(fixture("init_flag_scheduler")).read_text()
    other = tmp_path / "other_flag.py"
    other.write_text(text.replace("need_mamba_block_aligned_split = False", "platform_tag = 3"))
    assert trace(cli, str(other), *BASE, budget=10) == trace(cli, "vllm==0.33.0", budget=10)


# --- a schedule() with its own loops that also calls another -------------------------------------


@fidelity
def test_a_prepass_then_the_base_schedule_is_one_error_with_the_workaround(cli: Cli) -> None:
    """A pre-pass of its own then ``super().schedule()``: one error naming both and
    ``--compose``; with ``--compose C9`` the class's inherited split runs as the release's."""
    policy = fixture("prepass_schedule")
    err = one_error(cli, "trace", policy, *BASE, *ONE)
    assert f"{policy}:12: schedule() runs its own scheduling loops (line 14)" in err
    assert "calls Scheduler.schedule() (line 24)" in err and "--compose Cn" in err
    ends = trace(cli, policy, *BASE, "--compose", "C9", budget=10)
    assert ends == trace(cli, "vllm==0.33.0", budget=10)


def test_fixtures_are_ours() -> None:
    """Every fixture of this file says it was written for chunkproof's tests."""
    names = [
        "layer_count_split",
        "infinite_threshold",
        "starred_split",
        "guarded_apply_patch",
        "async_device_scheduler",
        "engine_and_scheduler_patch",
        "init_flag_scheduler",
        "init_flag_patch",
        "prepass_schedule",
    ]
    for name in names:
        assert "written for chunkproof's tests" in Path(fixture(name)).read_text(), name


@fidelity
def test_the_block_floor_reads_the_same_through_every_construct(tmp_path: Path, cli: Cli) -> None:
    """The split behind ``float("inf")``, behind starred arguments, and patched beside other
    classes is the same block floor: the explorer's verdicts are identical."""
    names = ["infinite_threshold", "starred_split", "engine_and_scheduler_patch"]
    found = [verdicts(cli, tmp_path / name, fixture(name), *BASE) for name in names]
    assert found[0] == found[1] == found[2]
    assert {v["status"] for v in found[0]} >= {"VIOLATED", "PROVED"}
