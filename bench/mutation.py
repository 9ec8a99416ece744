"""Mutation report: do the tests notice a one-token change in the model?

A catalogue is fixed and deterministic: every single-token mutant of its target modules
(:data:`MODEL`, the default: the splits and stages, the integer helpers, the composition table,
the properties, the slot oracle and the symbolic encoding; :data:`SYSTEM`: the scheduler step
over several requests) that swaps a comparison (``<`` and ``<=``, ``>`` and ``>=``, ``==`` and
``!=``), an arithmetic operator (``+`` and ``-``, ``//`` and ``*``), a boolean operator
(``and`` and ``or``), a boolean constant, or the integer constants 0 and 1, in code (never in
docstrings, comments or string concatenation), and in the composition table a release's
composition name or split variant for its neighbour (``"C4"`` for ``"C5"``, ``split_v4`` for
``split_v5``); mutants are taken evenly spaced over that list, in (file, line, column) order,
``--count`` of them.

Each mutant is applied to a scratch copy of the package (the working tree is never touched) and
the catalogue's test selection (or with ``--quick`` only its quick stage) runs on it in a fresh
interpreter with the copy first on ``PYTHONPATH``, in two stages: the quick stage first, then,
if it passes, the rest of the selection; the mutant is *killed* when a stage fails (or times
out), *survives* when the whole selection passes (a timeout is reported as such). Before the
catalogue, the unmutated copy must pass and the catalogue's canary mutant must be killed, so a
report cannot be vacuous. A mutant shown equivalent to the original (:data:`EQUIVALENT`, each
with the reason) is not run and not counted. Printed: every surviving mutant (file:line, the
change) and the kill rate, as a ratio of the mutants run; ``--strict`` exits 1 when one
survives (the subset ``.ci/run`` runs).

    python bench/mutation.py [--catalogue model|system] [--count 60] [--quick] [--strict]
                             [--start I] [--stop J] [--timeout 600] [--list]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Catalogue:
    """What one catalogue mutates and runs: the target modules, the test selection, its quick
    stage (module docstring) and the canary, a (path, line, replacement) every run must
    kill."""

    targets: tuple[str, ...]
    selection: tuple[str, ...]
    quick: tuple[str, ...]
    canary: tuple[str, str, str]


_MODEL_SELECTION = (
    "tests/test_known_answers.py",
    "tests/test_properties.py",
    "tests/test_slots.py",
    "tests/test_subset.py",
    "tests/test_explorer_bruteforce.py::test_explorer_equals_brute_force",
    "tests/test_encoder_model.py",
    "tests/test_40709.py",
    "tests/test_replay.py",
    "tests/test_prover.py",
    "tests/test_fidelity.py",
    "tests/test_encoder_fidelity.py::test_encoder_step_matches_real_method",
    "tests/test_scheduler_step.py",
)
MODEL = Catalogue(
    targets=(
        "model/arith.py",
        "model/splits.py",
        "model/stages.py",
        "model/builtin.py",
        "spec/properties.py",
        "spec/slots.py",
        "spec/request_symbolic.py",
    ),
    selection=_MODEL_SELECTION,
    quick=_MODEL_SELECTION[:7],
    canary=("model/arith.py", "    return x // m * m\n", "    return x\n"),
)
"""The single-request model (the default): the splits and stages, the integer helpers, the
composition table, the properties, the slot oracle and the prover's encoding. Its selection:
the model's own tests, the fidelity tests against the real release methods (they read the
releases from the user cache, which a first run of the test suite fills) and the scheduler
step, whose loops the composition table decides; about 5 minutes per surviving mutant on two
cores. Its quick stage: the model's own tests, without replay, the prover and the fidelity
tests (about a minute per surviving mutant). Canary: ``fl`` stops flooring."""

_SYSTEM_SELECTION = (
    "tests/test_loop_rules.py",
    "tests/test_scheduler_step.py",
    "tests/test_system_prove.py::test_the_symbolic_step_is_the_explicit_one_on_every_transition",
    "tests/test_system_pool.py::test_the_symbolic_pool_step_is_the_explicit_one",
    "tests/test_adaptive_floor.py",
    "tests/test_system_counterexamples.py",
    "tests/test_schedule_composition.py",
    "tests/test_system_prove.py",
)
SYSTEM = Catalogue(
    targets=(
        "spec/scheduler_loops.py",
        "spec/scheduler_step.py",
        "spec/scheduler_step_symbolic.py",
        "spec/system_properties.py",
        "spec/scheduler_trace.py",
    ),
    selection=_SYSTEM_SELECTION,
    quick=_SYSTEM_SELECTION[:4],
    canary=("spec/scheduler_loops.py", "        left = left - chunk[p]\n", "        left = left\n"),
)
"""The scheduler step over several requests (``--catalogue system``): its loop rules, the
explicit and symbolic steps, S-LIVE, HOL and STARVE, and one instance's trace and replay. Its
selection: the scheduler step's tests, the repros and replay of the system counterexamples,
the ``schedule()`` compositions read from the releases and the symbolic step (about 5 minutes
per surviving mutant on two cores); the quick stage, the loop rules' and the step's tests
and the symbolic step asked every transition of the explicit one, without and with a pool
(about 90 s).
Canary: the running loop stops taking its chunks from the budget."""

_POOL_SELECTION = (
    "tests/test_kv_blocks.py",
    "tests/test_pool_property.py",
    "tests/test_kv_alloc_fidelity.py",
    "tests/test_kv_hit_fidelity.py",
    "tests/test_p8_repro.py",
)
POOL = Catalogue(
    targets=("spec/kv_blocks.py",),
    selection=_POOL_SELECTION,
    quick=_POOL_SELECTION[:2],
    canary=(
        "spec/kv_blocks.py",
        "    mamba = blocks_v33(cfg, c, e) + tail_copy_v32(cfg, c)\n",
        "    mamba = blocks_v33(cfg, c, e)\n",
    ),
)
"""The KV block pool of SPEC KV2 (``--catalogue pool``): its rules and P8. Its selection: the
rules' and P8's own tests, then the rules against each release's ``allocate_slots`` (fresh and
at a seeded hit) and the P8 repros on the real trees; the quick stage, the first two (about
20 s). Canary: 0.33's tail copy is no longer asked."""

CATALOGUES = {"model": MODEL, "system": SYSTEM, "pool": POOL}
SWAPS = {
    "<": "<=",
    "<=": "<",
    ">": ">=",
    ">=": ">",
    "==": "!=",
    "!=": "==",
    "+": "-",
    "-": "+",
    "//": "*",
    "and": "or",
    "or": "and",
    "True": "False",
    "False": "True",
    "0": "1",
    "1": "0",
}
"""The single-token replacements."""
EQUIVALENT = {
    "spec/kv_blocks.py: return tail < cfg.prompt and tail_copy_v32(cfg, tail) > 0 "
    ":: 12 '<' -> '<='": (
        "0.32's tail, ck33(P, h, D, L_h), is at most P - 1 without the drop and fl(P, h) - h "
        "with it, never P: the two tests agree (0.26's and 0.31's tail, fl(P, h), can be P: "
        "test_a_tail_at_the_prompts_end_is_no_chunk_start)"
    ),
    "spec/properties.py: return r > 0 and (over or dropped) :: 9 '>' -> '>='": (
        "r >= 0 always, and at r = 0 neither branch holds: every engine judges an edge property "
        "only on a chunk that moves (c >= 0, e > c), so c < 0 and e == 0 are both false"
    ),
    "model/arith.py: and s < p < e :: 6 '<' -> '<='": (
        "s < p follows from the conjunct before it, s + h <= p, as h >= 1 (SPEC S1)"
    ),
    "model/splits.py: s4 = c + fl(cfg.junction - c, block) if c < cfg.junction < e else 0 "
    ":: 42 '<' -> '<='": (
        "at c = J the stop is c + fl(0, B) = c, which stopmin ignores (only stops strictly "
        "inside (c, e) count), as it ignores the 0 of the original"
    ),
    "model/stages.py: if refused < 0: :: 13 '0' -> '1'": (
        "it differs only when the first refused item starts at 0, and no call refuses that "
        "item: it is tested only at admission (at c > 0 the call tests items from c on), "
        "first and with nothing held (held_embeds is 0 at c0), and it fits the cache and the "
        "budget alone (items_fit_encoder)"
    ),
    "model/stages.py: return 1 if eagle_family(cfg, 0) else 0 :: 30 '0' -> '1'": (
        "eagle_family reads the configuration only (use_eagle is the engine's flag, the same at "
        "every c); its c argument is there for the step view's signature"
    ),
    "spec/request_symbolic.py: for pattern, item in zip(self.cell.layout, self.view.mm_items, "
    "strict=True): :: 70 'True' -> 'False'": (
        "the view's items are built one per item of the cell's layout (SymbolicRequest's "
        "constructor), so the two always have the same length and strict= never matters"
    ),
    "spec/scheduler_step.py: if count >= 2 and whole // count <= theta: :: 9 '>=' -> '>'": (
        "it differs only when count = 2 and M // 2 <= theta, where the original stops; the "
        "mutant goes on to count = 3, whose theta_eff max(theta, M // 3) = theta equals count "
        "2's, so nothing is appended, and stops there: the same choices"
    ),
    "spec/scheduler_step.py: if len(instances) * (k * len(PHASE_NAMES) * radix * items) ** k "
    ">= 1 << 62: :: 64 '>=' -> '>'": (
        "the two differ only when the product equals 2**62, and it never does: it has the "
        "factor len(PHASE_NAMES) ** k = 3 ** k (k >= 1), which 2**62 has not"
    ),
    "spec/scheduler_trace.py: zip(recorded.requests, actual.requests, strict=True) :: 47 "
    "'True' -> 'False'": (
        "the lines just above return an error when the two lengths differ, so the zip's "
        "lengths are always equal and strict= never matters"
    ),
    "spec/slots.py: if start <= 0 or start % cfg.block == 0: :: 9 '<=' -> '<'": (
        "a chunk's start is never negative, and at start = 0 the second test, 0 % B == 0, "
        "returns False as the first does"
    ),
}
"""Mutants shown equivalent, by :meth:`Mutant.key` (the line's text, not its number), with the
reason; they are not run."""


@dataclass(frozen=True)
class Mutant:
    """One token of ``path`` (line, column) replaced: ``old`` becomes ``new``."""

    path: str
    line: int
    column: int
    old: str
    new: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.old!r} -> {self.new!r}"

    def key(self) -> str:
        """The mutant by its line's text and the token's column in it (for :data:`EQUIVALENT`,
        which edits above the line leave valid)."""
        row = (ROOT / self.path).read_text().splitlines()[self.line - 1]
        indent = len(row) - len(row.lstrip())
        return f"{self.path}: {row.strip()} :: {self.column - indent} {self.old!r} -> {self.new!r}"

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        row = lines[self.line - 1]
        assert row[self.column : self.column + len(self.old)] == self.old, self
        lines[self.line - 1] = row[: self.column] + self.new + row[self.column + len(self.old) :]
        return "".join(lines)


_SPLITS = ("1", "2", "2b", "3", "4", "5", "6", "7", "8", "9")
TABLE_SWAPS = {
    **{f'"C{i}"': f'"C{i + 1 if i < 9 else 8}"' for i in range(1, 10)},
    **{f"split_v{a}": f"split_v{b}" for a, b in zip(_SPLITS, (*_SPLITS[1:], "8"), strict=True)},
}
"""The composition table's mutants (``model/builtin.py``): a neighbouring C-name or split."""


def candidates(path: str) -> list[Mutant]:
    """Every swappable token of ``path`` in code: not in a docstring, a comment, an import,
    a definition line or a string concatenation; in the composition table, its entries."""
    text = (ROOT / path).read_text()
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    found = []
    for i, token in enumerate(tokens):
        row, column = token.start
        if path == "model/builtin.py":
            if token.string in TABLE_SWAPS and token.line.lstrip().startswith("_release("):
                found.append(Mutant(path, row, column, token.string, TABLE_SWAPS[token.string]))
            continue
        if token.type not in (tokenize.OP, tokenize.NAME, tokenize.NUMBER):
            continue
        if token.string not in SWAPS:
            continue
        if token.line.lstrip().startswith(("import ", "from ", "def ", "class ", "@")):
            continue
        near = {tokens[j].type for j in (i - 1, i + 1) if 0 <= j < len(tokens)}
        if token.string in "+-" and tokenize.STRING in near:
            continue
        found.append(Mutant(path, row, column, token.string, SWAPS[token.string]))
    return found


def catalogue(count: int, targets: tuple[str, ...] = MODEL.targets) -> list[Mutant]:
    """``count`` mutants evenly spaced over every candidate of ``targets`` (module
    docstring)."""
    every = [m for path in targets for m in candidates(path)]
    if count >= len(every):
        return every
    step = len(every) / count
    return [every[int(i * step)] for i in range(count)]


PASSED, FAILED, TIMED_OUT = "passed", "failed", "timed out"


def run_tests(package: Path, timeout: int, selection: tuple[str, ...]) -> str:
    """``selection`` on the package copy at ``package / "chunkproof"``: :data:`PASSED`,
    :data:`FAILED` or :data:`TIMED_OUT`."""
    env = {**os.environ, "PYTHONPATH": str(package)}
    # -m "": every test of the selection, fidelity ones included (pyproject's default leaves
    # them out).
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", ""]
    command += selection
    try:
        result = subprocess.run(
            command,
            cwd=package / "chunkproof",
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return TIMED_OUT
    return PASSED if result.returncode == 0 else FAILED


def with_change(
    copy: Path,
    path: str,
    text: str,
    package: Path,
    timeout: int,
    selection: tuple[str, ...],
    quick: tuple[str, ...],
) -> str:
    """Run ``selection`` in its stages (module docstring: ``quick`` first, then the rest
    without the tests ``quick`` ran) with ``path`` of the copy replaced by ``text``; restore it
    after. :data:`PASSED` if every stage passes, else the
    first stage's outcome."""
    target = copy / path
    original = target.read_text()
    target.write_text(text)
    rest = tuple(s for s in selection if s not in quick)
    ran = tuple(arg for node in quick if "::" in node for arg in ("--deselect", node))
    stages = [quick, rest + ran if rest else ()]
    try:
        for stage in stages:
            outcome = run_tests(package, timeout, stage) if stage else PASSED
            if outcome != PASSED:
                return outcome
        return PASSED
    finally:
        target.write_text(original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60, help="mutants to run (60)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test run")
    parser.add_argument("--list", action="store_true", help="print the catalogue and stop")
    parser.add_argument(
        "--catalogue", choices=sorted(CATALOGUES), default="model", help="what to mutate (model)"
    )
    parser.add_argument("--quick", action="store_true", help="the quick stage alone")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a mutant survives")
    parser.add_argument(
        "--start", type=int, default=1, help="begin at this mutant of the list (resume a run)"
    )
    parser.add_argument("--stop", type=int, help="end at this mutant of the list (split a run)")
    args = parser.parse_args()
    chosen = CATALOGUES[args.catalogue]
    selection = chosen.quick if args.quick else chosen.selection
    mutants = catalogue(args.count, chosen.targets)
    if args.list:
        for mutant in mutants:
            reason = EQUIVALENT.get(mutant.key())
            print(mutant.describe() + (f" (equivalent: {reason})" if reason else ""))
        return
    equivalent = [m for m in mutants if m.key() in EQUIVALENT]
    mutants = [m for m in mutants if m.key() not in EQUIVALENT]
    stop = len(mutants) if args.stop is None else min(args.stop, len(mutants))
    with tempfile.TemporaryDirectory(prefix="chunkproof-mutation-") as scratch:
        package = Path(scratch)
        copy = package / "chunkproof"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "chunkproof-out*"))
        started = time.perf_counter()
        unmutated = run_tests(package, args.timeout, selection)
        if unmutated == TIMED_OUT:
            sys.exit(f"the unmutated copy's selection ran past --timeout {args.timeout} s")
        if unmutated != PASSED:
            sys.exit("the unmutated copy fails the selection: fix the tests first")
        baseline = time.perf_counter() - started
        path, old, new = chosen.canary
        text = (copy / path).read_text()
        canary = text.replace(old, new, 1)
        run = (package, args.timeout, selection, chosen.quick)
        if with_change(copy, path, canary, *run) != FAILED:
            sys.exit("the canary mutant survives: the copy is not the code under test")
        print(
            f"{len(mutants)} mutants ({len(equivalent)} more shown equivalent, not run); "
            f"the selection takes {baseline:.0f} s unmutated"
        )
        survivors, timed_out = [], []
        for index, mutant in enumerate(mutants, 1):
            if not args.start <= index <= stop:
                continue
            text = (copy / mutant.path).read_text()
            changed = mutant.apply(text)
            outcome = with_change(copy, mutant.path, changed, *run)
            verdict = {PASSED: "SURVIVED", FAILED: "killed", TIMED_OUT: "killed (timed out)"}
            print(f"[{index}/{len(mutants)}] {verdict[outcome]}: {mutant.describe()}", flush=True)
            if outcome == PASSED:
                survivors.append(mutant)
            elif outcome == TIMED_OUT:
                timed_out.append(mutant)
    ran = max(stop - args.start + 1, 0)
    killed = ran - len(survivors)
    print(
        f"killed {killed} of {ran} run ({len(timed_out)} by a timeout: an endless loop, or a "
        f"machine too loaded for --timeout): kill rate {killed / max(ran, 1):.2f}"
    )
    for mutant in survivors:
        print(f"  survived: {mutant.describe()}")
    for mutant in equivalent:
        print(f"  equivalent: {mutant.describe()}: {EQUIVALENT[mutant.key()]}")
    if args.strict and survivors:
        sys.exit(1)


if __name__ == "__main__":
    main()
