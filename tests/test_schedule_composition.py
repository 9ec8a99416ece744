"""The composition read from ``schedule()`` (SPEC X3; history note section 6).

For every release of the built-in variants (``RELEASES`` of the fidelity tests: each release's
wheel is fetched once into the user cache and only its ``scheduler.py`` and the helpers are
kept), the chain of caps extracted from the release's own ``schedule()`` is its built-in
C-variant: the same C-name, the same stages in the same order, the same threshold form; and
``conform`` proves the running loop's chain, run as its own statements in the policy subset
(the budget cap included), equal to the built-in policy with Z3 and on a grid, while the
chain of both loops (the waiting loop's statements at admission) equals it on a grid with
prefix hits, external hits, G != B and resumed requests. Small ``schedule()`` sources written
here (never vLLM text) pin the extraction's rules: extra stages, a missing reservation, what a
zero does, and the named errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from test_fidelity import RELEASES

from chunkproof.checker.engines.conform import EQUAL, conform, grid_difference
from chunkproof.model import stages
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ChunkproofError, PolicyError
from chunkproof.model.policy import FIXED_INPUTS
from chunkproof.model.step import step
from chunkproof.source.encoder import EncoderMethodStage
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.source.policy import source_composition, source_policy
from chunkproof.source.schedule import Composition, ScheduleStage, segments
from chunkproof.spec.space import Space, grid_from

THETA: dict[object, str] = {stages.cap_static_threshold: "static", stages.cap_lone_request: "lone"}
"""The built-in budget caps and the threshold form each stands for (SPEC S3)."""

RUNNING_RANGE = {
    "block": "4,8",
    "lookahead": "0-3",
    "drop": "both",
    "prompt": "1-10",
    "max_sched": "1-6",
    "threshold": "0-64",
}
"""The running loop's regime: no admission hits (the running loop gets none)."""
BOTH_LOOPS_GRID = {
    **RUNNING_RANGE,
    "split_block": "B,B/2",
    "tokens": "P,P+1",
    "threshold": "0,2,5",
    "start": "0,external",
}


def running_chain(composition: Composition) -> list[str]:
    """The stages of the running loop's chain, the cap with its threshold form, and the
    encoder cap where the loop calls it."""
    chain = []
    for segment in segments(composition):
        if not segment.running:
            continue
        chain.append(f"cap:{composition.theta}" if segment.kind == "cap" else segment.kind)
    after_split = composition.encoder_after_split()
    if after_split is not None:
        chain.insert(chain.index("split") + after_split, "encoder")
    return chain


def builtin_chain(version: str) -> list[str]:
    """The built-in C-variant's stages, the cap with its threshold form."""
    policy = policy_for_release(version)
    return [f"cap:{THETA[s.function]}" if s.name == "cap" else s.name for s in policy.stages]


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_extracted_running_loop_is_the_builtin_variant(version: str) -> None:
    """The release's own schedule() gives its C-variant: name, stages, threshold form; the
    policy ``vllm==X.Y.Z`` runs the built-in cap and the real methods in that order."""
    composition = source_composition(f"vllm=={version}")
    assert composition is not None
    builtin = policy_for_release(version)
    assert composition.name == builtin.composition
    assert running_chain(composition) == builtin_chain(version)
    assert composition.running.signature().endswith("0=>continue")
    assert composition.extras() == []
    policy = resolve_policy(f"vllm=={version}")
    assert [s.name for s in policy.stages] == [s.name for s in builtin.stages]
    assert policy.stage("cap").function is builtin.stage("cap").function  # type: ignore[union-attr]
    assert policy.composition == builtin.composition


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_the_policy_names_the_inputs_its_schedule_reads_and_the_model_fixes(version: str) -> None:
    """Every release's schedule() caps by max_model_len and skips an asynchronous KV load, the
    model fixes both; it defers prefills exactly where schedule() takes ``throttle_prefills``
    (0.24 on), and the policy read from it names that fix; the built-in model of the release
    names exactly the same fixes (no other release's)."""
    composition = source_composition(f"vllm=={version}")
    assert composition is not None
    fixed = resolve_policy(f"vllm=={version}").fixed
    assert fixed == composition.fixed()
    assert {FIXED_INPUTS["max_model_len"], FIXED_INPUTS["load_kv_async"]} <= set(fixed)
    throttles = "throttle_prefills" in {a.arg for a in composition.schedule.node.args.args}
    assert (FIXED_INPUTS["defer_prefills"] in fixed) == throttles
    assert set(fixed) == set(policy_for_release(version).fixed)


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_conform_proves_the_running_loop_composition_equal(version: str) -> None:
    """Every stage interpreted from the running loop's statements (init, theta with its
    per-step form, budget, split, reservation; the encoder cap is the real method where the
    loop calls it) against the built-in C-variant: EQUAL with Z3 on every cell and on the
    grid."""
    interpreted = source_policy(f"vllm=={version}", interpreted="running")
    encoder = interpreted.stage("encoder")
    assert encoder is not None and isinstance(encoder.function, EncoderMethodStage)
    assert all(isinstance(s.function, ScheduleStage) for s in interpreted.stages if s != encoder)
    space = Space((grid_from(RUNNING_RANGE),))
    result = conform(policy_for_release(version), interpreted, space, space, 120_000)
    assert (result.status, result.difference) == (EQUAL, None)
    assert result.cells > 0 and result.grid_configs > 0


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_both_loops_composition_equals_the_builtin_on_a_grid(version: str) -> None:
    """The waiting loop's statements at admission (prefix and external hits, u) and the
    running loop's after: the built-in C-variant on every (config, c, b) of the grid."""
    interpreted = source_policy(f"vllm=={version}", interpreted="both")
    compared, difference = grid_difference(
        policy_for_release(version), interpreted, Space((grid_from(BOTH_LOOPS_GRID),))
    )
    assert difference is None and compared > 0


# --- small schedule() sources written for these tests ------------------------------------------

HEAD = """\
class Scheduler:
    def __init__(self, config):
        self.need_mamba_block_aligned_split = config.hybrid

    def _mamba_block_aligned_split(self, request, num_new_tokens, local=0, external=0):
        start = request.num_computed_tokens + local + external
        end = start + num_new_tokens
        if end < request.num_tokens:
            end = end // self.cache_config.block_size * self.cache_config.block_size
        return max(end - start, 0)

    def _reserve_prefill_lookahead(self, request, num_computed_tokens, num_new_tokens):
        return num_new_tokens
{extra_method}
    def schedule(self):
        token_budget = self.max_num_scheduled_tokens
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            num_new_tokens = request.num_tokens_with_spec - request.num_computed_tokens
            if 0 < self.scheduler_config.long_prefill_token_threshold < num_new_tokens:
                num_new_tokens = self.scheduler_config.long_prefill_token_threshold
            num_new_tokens = min(num_new_tokens, token_budget)
{running}
            if num_new_tokens == 0:
                {running_zero}
            self.kv_cache_manager.allocate_slots(request, num_new_tokens)
            req_index += 1
        while self.waiting and token_budget > 0:
            request = self.waiting.peek_request()
            num_computed_tokens = 0
            num_new_tokens = request.num_tokens - num_computed_tokens
            num_new_tokens = min(num_new_tokens, token_budget)
{waiting}
            self.kv_cache_manager.allocate_slots(request, num_new_tokens)
"""
SPLIT_RUNNING = """\
            if self.need_mamba_block_aligned_split:
                num_new_tokens = self._mamba_block_aligned_split(request, num_new_tokens)
"""
SPLIT_WAITING = """\
            if self.need_mamba_block_aligned_split:
                num_new_tokens = self._mamba_block_aligned_split(
                    request, num_new_tokens, num_computed_tokens, 0
                )
                if num_new_tokens == 0:
                    break
"""
RESERVE_RUNNING = """\
            num_new_tokens = self._reserve_prefill_lookahead(
                request, request.num_computed_tokens, num_new_tokens
            )
"""
RESERVE_WAITING = """\
            num_new_tokens = self._reserve_prefill_lookahead(
                request, num_computed_tokens, num_new_tokens
            )
"""
QUARTER = "            num_new_tokens -= num_new_tokens % 4\n"
GRID_STOP = """\
    def _grid_stop(self, request, num_new_tokens, num_computed_tokens):
        end = num_computed_tokens + num_new_tokens
        if end % 3 == 1 and num_new_tokens > 1:
            return num_new_tokens - 1
        return num_new_tokens
"""
GRID_STOP_RUNNING = """\
            if self.grid_stop:
                num_new_tokens = self._grid_stop(
                    request, num_new_tokens, request.num_computed_tokens
                )
"""
GRID_STOP_WAITING = GRID_STOP_RUNNING.replace("request.num_computed_tokens", "num_computed_tokens")


def write_scheduler(tmp_path: Path, **parts: str) -> Path:
    """A ``scheduler.py`` of the shape above in a tree, with ``parts`` filled in."""
    values = {
        "extra_method": "",
        "running": SPLIT_RUNNING,
        "waiting": SPLIT_WAITING,
        "running_zero": "req_index += 1\n                continue",
        **parts,
    }
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEAD.format(**values))
    return path


def test_a_schedule_without_reservation_has_none(tmp_path: Path) -> None:
    """The class defines the reservation, but schedule() never calls it: no reservation
    stage (the chain of no C-variant: a schedule() of its own)."""
    path = write_scheduler(tmp_path)
    policy = resolve_policy(str(path))
    assert [s.name for s in policy.stages] == ["cap", "split"]
    assert policy.reservation_variant is None
    composition = source_composition(str(path))
    assert composition is not None and composition.name == "schedule()"
    assert running_chain(composition) == ["cap:static", "split"]


def test_reservation_and_extra_stages_run_in_their_order(tmp_path: Path) -> None:
    """An arithmetic stage after the split and a flag-guarded method stage before it, in
    both loops: each runs where schedule() puts it (the trace shows the values); the flag
    is an input the model lacks until --set gives it."""
    path = write_scheduler(
        tmp_path,
        extra_method=GRID_STOP,
        running=GRID_STOP_RUNNING + SPLIT_RUNNING + QUARTER + RESERVE_RUNNING,
        waiting=GRID_STOP_WAITING + SPLIT_WAITING + QUARTER + RESERVE_WAITING,
    )
    composition = source_composition(str(path))
    assert composition is not None
    assert composition.extras() == ["grid_stop", "[num_new_tokens -= num_new_tokens % 4]"]
    unset = resolve_policy(str(path))
    with pytest.raises(ChunkproofError, match=r"reads self\.grid_stop, an input .*--set self"):
        step(unset, Config(block=8, prompt=40, max_sched=16), 0, 16)
    policy = resolve_policy(str(path), overrides=(("self.grid_stop", True),))
    assert [s.name for s in policy.stages] == ["cap", "cap", "split", "split", "reservation"]
    cfg = Config(block=8, prompt=40, max_sched=32)
    # c = 0, b = 29: cap 29, grid stop at end 29 (29 % 3 == 2: none), split to 24, quarter 24
    assert step(policy, cfg, 0, 29).n == 29 and step(policy, cfg, 0, 29).chunk == 24
    # c = 0, b = 31: end 31 % 3 == 1: stop at 30; split 24; quarter 24
    taken = step(policy, cfg, 0, 31)
    assert (taken.n, taken.split, taken.chunk) == (30, 24, 24)
    # c = 24, b = 16, T = 40: end 40 % 3 == 1 stops at 39, which the split floors to 32
    taken = step(policy, cfg, 24, 16)
    assert (taken.n, taken.split, taken.chunk) == (15, 8, 8)
    off = resolve_policy(str(path), overrides=(("self.grid_stop", False),))
    assert step(off, cfg, 24, 16).chunk == 16


def test_a_zero_before_a_stage_stops_the_chain(tmp_path: Path) -> None:
    """A zero test between stages: a stage after it never sees a chunk of 0 (here the
    reservation would raise on one)."""
    raising = (
        "            if num_new_tokens == 0:\n                continue\n"
        "            assert num_new_tokens > 0\n"
    )
    path = write_scheduler(
        tmp_path,
        running=SPLIT_RUNNING + raising + RESERVE_RUNNING,
        waiting=SPLIT_WAITING + RESERVE_WAITING,
    )
    policy = resolve_policy(str(path))
    cfg = Config(block=8, prompt=40, max_sched=16)
    taken = step(policy, cfg, 4, 3)  # the split floors 3 to 0 from c = 4
    assert (taken.split, taken.chunk, taken.crash) == (0, 0, None)


def test_an_unbindable_local_is_one_named_error(tmp_path: Path, cli: Cli) -> None:
    """A stage that reads a local of schedule() the model cannot bind (not a model input,
    not a plain assignment): one line naming it and where."""
    stage = (
        "            spare_slots, _ = self.free_slots()\n"
        "            num_new_tokens = min(num_new_tokens, spare_slots)\n"
    )
    path = write_scheduler(tmp_path, running=SPLIT_RUNNING + stage, waiting=SPLIT_WAITING)
    run = cli("trace", str(path), "--block", "8", "--prompt", "20", "--budget", "8")
    assert (run.code, run.out) == (2, "")
    assert run.err.count("\n") == 1
    line = _line(path, stage) + 1
    assert f"{path}:{line}: a stage of schedule() reads 'spare_slots'" in run.err


def test_a_stage_outside_the_subset_is_one_named_error(tmp_path: Path, cli: Cli) -> None:
    """An extra stage whose method leaves the policy subset: one line naming file and line."""
    method = (
        "    def _loop_stage(self, request, num_new_tokens, num_computed_tokens):\n"
        "        for _ in range(2):\n            num_new_tokens -= 1\n"
        "        return num_new_tokens\n"
    )
    stage = "            num_new_tokens = self._loop_stage(request, num_new_tokens, 0)\n"
    path = write_scheduler(
        tmp_path,
        extra_method=method,
        running=SPLIT_RUNNING + stage,
        waiting=SPLIT_WAITING + stage,
    )
    run = cli("trace", str(path), "--block", "8", "--prompt", "20", "--budget", "8")
    assert (run.code, run.out) == (2, "") and run.err.count("\n") == 1
    assert f"{path}:{_line(path, '        for _ in range(2):')}: For is outside" in run.err


def test_loops_that_disagree_on_the_anchors_are_one_named_error(tmp_path: Path) -> None:
    """The running loop reserves and the waiting loop does not: chunkproof runs one chain."""
    path = write_scheduler(tmp_path, running=SPLIT_RUNNING + RESERVE_RUNNING)
    with pytest.raises(PolicyError, match="the running loop calls split then reservation"):
        resolve_policy(str(path))


def test_compose_replaces_the_extracted_composition(tmp_path: Path) -> None:
    """--compose C9 ignores schedule(): the built-in chain with the real methods."""
    path = write_scheduler(tmp_path)
    policy = resolve_policy(str(path), compose="C9")
    assert policy.composition == "C9"
    assert [s.name for s in policy.stages] == ["cap", "split", "encoder", "reservation"]


def _line(path: Path, text: str) -> int:
    """The first line of ``path`` at which ``text`` starts."""
    content = path.read_text()
    return content[: content.index(text)].count("\n") + 1
