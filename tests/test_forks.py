"""Real scheduler code as people write it (SPEC X2): a subclass that overrides only the split,
a patch module applied to a release, and a checkout whose ``schedule()`` has an extra stage.

Each shape is a small fixture written for the project (``tests/fixtures/forks/``, or an edit
of a copy of a cached release made at test time; never third-party code), checked through the
command line against the explorer run on an equivalent built-in policy: the SPEC V
``lookahead-in-split`` fix for the patch module, and ``module:function`` splits in the
composition of ``vllm-latest`` (``tests/fixtures/forks/equivalents.py``) for the others. The
verdicts (status, counts, minimal counterexamples) must be identical, and ``conform`` proves
the pairs equal. The tests read vLLM 0.33.0's cached source (``release_root``), so they carry
the ``fidelity`` marker.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS

from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.source.policy import source_composition
from chunkproof.source.releases import release_root

pytestmark = pytest.mark.fidelity

FORKS = Path(__file__).parent / "fixtures" / "forks"
DEVICE = str(FORKS / "device_scheduler.py")
PATCH = str(FORKS / "window_patch.py")
EQUIVALENTS = FORKS / "equivalents.py"
BASE = ["--base", "vllm==0.33.0"]
GRID = ["--set", "self.vllm_config.model_config.get_mamba_chunk_size()=8"]
GRID_OVERRIDE = ("self.vllm_config.model_config.get_mamba_chunk_size()", 8)
PREFIX_ON = ["--set", "self.deterministic_prefix_caching=True"]
PREFIX_OFF = ["--set", "self.deterministic_prefix_caching=False"]
RANGES = ["--block", "4,8", "--lookahead", "0-3", "--drop", "both", "--prompt", "1-20"]
RANGES += ["--max-sched", "1-10"]
"""The explorer's range for every comparison (a few seconds per run)."""
CONFORM = ["--block", "4,8", "--lookahead", "0-3", "--prompt", "1-12", "--max-sched", "1-8"]
CONFORM += SOLVER_ARGS


def verdicts(cli: Cli, policy: str, *options: str, out: Path) -> list[dict[str, Any]]:
    """``explore POLICY`` on :data:`RANGES`: each verdict without its file paths."""
    run = cli("explore", policy, *options, *RANGES, "--out", str(out), "--jobs", "1", "--json")
    assert run.code in (0, 1), run.err
    return [without_files(verdict) for verdict in run.json()["verdicts"]]


def without_files(value: Any) -> Any:
    """``value`` without the paths of the files a run wrote (they name the policy)."""
    if isinstance(value, dict):
        return {
            k: without_files(v) for k, v in value.items() if k not in ("counterexample", "picture")
        }
    if isinstance(value, list):
        return [without_files(v) for v in value]
    return value


def same_verdicts(cli: Cli, tmp_path: Path, mine: list[str], builtin: list[str]) -> None:
    """The explorer's verdicts on both policies are identical, and some property fails (so
    the comparison has counterexamples to compare)."""
    a = verdicts(cli, *mine, out=tmp_path / "a")
    b = verdicts(cli, *builtin, out=tmp_path / "b")
    assert a == b
    assert {v["status"] for v in a} >= {"VIOLATED", "PROVED"}


# --- a subclass that overrides only the split ------------------------------------------------


def test_subclass_overriding_the_split_runs_as_python_would(tmp_path: Path, cli: Cli) -> None:
    """DeviceScheduler(Scheduler) overrides the split only: its split (calling super() for a
    chunk that finishes the request) runs with vLLM's reservation and schedule(); verdicts as
    the equivalent split in the composition of vllm-latest."""
    same_verdicts(
        cli,
        tmp_path,
        [DEVICE, *BASE, *GRID],
        [f"{EQUIVALENTS}:device_grid_split"],
    )
    policy = resolve_policy(DEVICE, overrides=(GRID_OVERRIDE,), base="vllm==0.33.0")
    assert policy.composition == "C9"
    assert "split DeviceScheduler._mamba_block_aligned_split" in policy.summary
    assert "reservation Scheduler._reserve_prefill_lookahead" in policy.summary
    run = cli(
        "conform",
        f"{EQUIVALENTS}:device_grid_split",
        "--against",
        DEVICE,
        *BASE,
        *GRID,
        *CONFORM,
        "--json",
    )
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out


def test_the_class_can_be_named(cli: Cli) -> None:
    """``path.py:Class`` and ``--class Class`` name the same policy as the file alone (its one
    scheduler class); the recorded options rebuild it."""
    alone = resolve_policy(DEVICE, overrides=(GRID_OVERRIDE,), base="vllm==0.33.0")
    named = resolve_policy(
        f"{DEVICE}:DeviceScheduler", overrides=(GRID_OVERRIDE,), base="vllm==0.33.0"
    )
    flag = resolve_policy(
        DEVICE, overrides=(GRID_OVERRIDE,), base="vllm==0.33.0", class_name="DeviceScheduler"
    )
    assert alone.source_sha256 == named.source_sha256 == flag.source_sha256
    assert named.options == ("--set", f"{GRID_OVERRIDE[0]}=8", "--base", "vllm==0.33.0")


def test_every_missing_input_is_named_with_its_line(cli: Cli) -> None:
    """Without --set, one run names the call the split makes on a stand-in, and where."""
    run = cli("trace", DEVICE, *BASE, "--block", "16", "--prompt", "49", "--budget", "16")
    line = _line(Path(DEVICE), "get_mamba_chunk_size()")
    assert (run.code, run.out) == (2, "")
    assert (
        "reads self.vllm_config.model_config.get_mamba_chunk_size(), an input chunkproof does "
        "not model; give it a value with --set "
        "self.vllm_config.model_config.get_mamba_chunk_size()=VALUE "
        f"(first read at {DEVICE}:{line})"
    ) in run.err


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("self.vllm_config=3", "reads self.vllm_config as an object"),
        ("self.vllm_config.model_config.get_mamba_chunk_size=8", "calls"),
        ("self.vllm_config.model_config.get_mamba_chunk_size()=None", "as an integer"),
    ],
)
def test_set_values_are_checked_for_type(flag: str, message: str, cli: Cli) -> None:
    """A value for an object, a plain value for a call, None where the code computes."""
    run = cli(
        "trace", DEVICE, *BASE, "--block", "16", "--prompt", "49", "--budget", "16", "--set", flag
    )
    assert run.code == 2 and message in run.err and run.err.count("\n") == 1


def test_a_base_the_tree_lacks_is_one_error_naming_every_module(tmp_path: Path, cli: Cli) -> None:
    """A subclass of AsyncScheduler that also uses a helper of its platform package, on a
    release cache without async_scheduler.py: one error naming the platform's module (the
    cache's AsyncScheduler reads as Scheduler, tests/test_fork_constructs.py). On a tree that
    has the base (here a copy of the release with an AsyncScheduler written for this test),
    the policy loads and inherits its split."""
    policy = tmp_path / "platform_scheduler.py"
    policy.write_text(
        "from vllm.v1.core.sched.async_scheduler import AsyncScheduler\n"
        "from vllm_platform.sizes import chunk_grid\n\n\n"
        "class PlatformScheduler(AsyncScheduler):\n"
        "    def _mamba_block_aligned_split(self, request, n, local=0, external=0):\n"
        "        return n // chunk_grid() * chunk_grid()\n"
    )
    run = cli("trace", str(policy), *BASE, "--block", "16", "--prompt", "49", "--budget", "16")
    assert (run.code, run.err.count("\n")) == (2, 1)
    assert "needs 1 module " in run.err
    assert "vllm.v1.core.sched.async_scheduler" not in run.err
    assert f"vllm_platform.sizes (imported at {policy}:2)" in run.err
    root = shutil.copytree(release_root("0.33.0"), tmp_path / "tree")
    (root / "vllm/v1/core/sched/async_scheduler.py").write_text(
        "from vllm.v1.core.sched.scheduler import Scheduler\n\n\n"
        "class AsyncScheduler(Scheduler):\n"
        "    def _update_after_schedule(self, output):\n        return output\n"
    )
    (tmp_path / "vllm_platform").mkdir()
    (tmp_path / "vllm_platform" / "__init__.py").write_text("")
    (tmp_path / "vllm_platform" / "sizes.py").write_text("def chunk_grid():\n    return 8\n")
    loaded = resolve_policy(str(policy), base=str(root))
    assert "split PlatformScheduler._mamba_block_aligned_split" in loaded.summary
    run = cli(
        "trace",
        str(policy),
        "--base",
        str(root),
        "--block",
        "16",
        "--prompt",
        "49",
        "--budget",
        "13",
        "--json",
    )
    assert run.json()["chunks"][:2] == [8, 8]


# --- a patch module applied to a release -----------------------------------------------------


def test_patch_module_is_applied_to_the_release(tmp_path: Path, cli: Cli) -> None:
    """window_patch.py wraps the split (functools.wraps, calling the original) and, through a
    registering decorator, the reservation (forwarding *args/**kwargs): on vLLM 0.33.0 it is
    lookahead-in-split, verdict for verdict, and conform proves it."""
    same_verdicts(cli, tmp_path, [PATCH, *BASE], ["lookahead-in-split"])
    policy = resolve_policy(PATCH, base="vllm==0.33.0")
    assert "patched by" in policy.summary
    assert "split _split_resolving_the_window" in policy.summary
    assert "reservation _reserve_leaving_aligned_ends" in policy.summary
    run = cli("conform", "lookahead-in-split", "--against", PATCH, *BASE, *CONFORM, "--json")
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out
    trace = cli(
        "trace",
        PATCH,
        *BASE,
        "--block",
        "16",
        "--lookahead",
        "3",
        "--prompt",
        "49",
        "--budget",
        "16",
        "--json",
    )
    assert trace.json()["ends"] == [16, 32, 48, 49]  # SPEC K, lookahead-in-split


def test_a_patch_function_runs_when_named(tmp_path: Path, cli: Cli) -> None:
    """A plugin's apply() that the module never calls patches nothing at import; named as
    ``patch.py:apply`` it is applied."""
    patch = tmp_path / "plugin_patch.py"
    patch.write_text(
        "from vllm.v1.core.sched.scheduler import Scheduler\n\n\n"
        "def _whole_blocks(self, request, num_new_tokens, local=0, external=0):\n"
        "    start = request.num_computed_tokens + local + external\n"
        "    end = start + num_new_tokens\n"
        "    if end < request.num_tokens:\n"
        "        end = end // self.cache_config.block_size * self.cache_config.block_size\n"
        "    return max(end - start, 0)\n\n\n"
        "def apply():\n"
        "    Scheduler._mamba_block_aligned_split = _whole_blocks\n"
    )
    run = cli("trace", str(patch), *BASE, "--block", "16", "--prompt", "40", "--budget", "16")
    assert run.code == 2 and f"name one, {patch}:apply" in run.err
    run = cli(
        "trace",
        f"{patch}:apply",
        *BASE,
        "--block",
        "16",
        "--prompt",
        "40",
        "--budget",
        "20",
        "--json",
    )
    assert run.json()["ends"] == [16, 32, 40]


def test_a_wrapper_using_args_otherwise_is_one_named_error(tmp_path: Path, cli: Cli) -> None:
    """*args forwarded to the original is read; any other use of it is outside the subset."""
    patch = tmp_path / "bad_patch.py"
    patch.write_text(
        "from vllm.v1.core.sched.scheduler import Scheduler\n\n"
        "_original = Scheduler._mamba_block_aligned_split\n\n\n"
        "def _split(self, request, num_new_tokens, *args):\n"
        "    if args:\n        return num_new_tokens\n"
        "    return _original(self, request, num_new_tokens, *args)\n\n\n"
        "Scheduler._mamba_block_aligned_split = _split\n"
    )
    run = cli("trace", str(patch), *BASE, "--block", "16", "--prompt", "40", "--budget", "16")
    assert (run.code, run.err.count("\n")) == (2, 1)
    assert f"{patch}:7: _split uses args other than to forward it" in run.err


# --- a checkout whose schedule() has an extra stage ------------------------------------------

RUNNING_SPLIT = "\n            # Apply Mamba alignment before encoder caps.\n"
WAITING_SPLIT = "\n                    # Apply Mamba alignment before encoder caps.\n"
RESERVATION_DEF = "    def _reserve_prefill_lookahead(\n"
RUNNING_STAGE = """
            if self.deterministic_prefix_caching:
                num_new_tokens = self._prefix_cache_aligned_split(
                    request, num_new_tokens, request.num_computed_tokens
                )"""
WAITING_STAGE = """
                    if self.deterministic_prefix_caching:
                        num_new_tokens = self._prefix_cache_aligned_split(
                            request, num_new_tokens, num_computed_tokens
                        )"""
STAGE_METHOD = """\
    def _prefix_cache_aligned_split(self, request, num_new_tokens, num_computed_tokens):
        # Written for chunkproof's tests: an uncached prompt stops at its last full block.
        if request.num_output_tokens > 0:
            return num_new_tokens
        prompt = request.num_prompt_tokens
        tail = prompt % self.block_size
        if prompt <= self.block_size or tail == 0:
            return num_new_tokens
        position = prompt - tail
        if num_computed_tokens < position < num_computed_tokens + num_new_tokens:
            return position - num_computed_tokens
        return num_new_tokens

"""


def fork_with_extra_stage(into: Path) -> Path:
    """A copy of vLLM 0.33.0's tree (no manifest: a checkout) whose schedule() runs an extra
    stage before the Mamba split in both loops, behind a flag of the scheduler."""
    root = shutil.copytree(release_root("0.33.0"), into)
    (root / "manifest.json").unlink()
    scheduler = root / SCHEDULER_FILE
    text = scheduler.read_text()
    for old, new in (
        (RUNNING_SPLIT, RUNNING_STAGE + RUNNING_SPLIT),
        (WAITING_SPLIT, WAITING_STAGE + WAITING_SPLIT),
        (RESERVATION_DEF, STAGE_METHOD + RESERVATION_DEF),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    scheduler.write_text(text)
    return root


def test_checkout_with_an_extra_stage_runs_it(tmp_path: Path, cli: Cli) -> None:
    """The extra stage is read from schedule() and run where it sits (before the split, in
    both loops): its flag is an input to give; on, the verdicts are those of the equivalent
    split, off, those of vllm-0.33; conform proves the first pair equal."""
    fork = str(fork_with_extra_stage(tmp_path / "fork"))
    composition = source_composition(fork)
    assert composition is not None
    assert composition.name == "C9+prefix_cache_aligned_split"
    policy = resolve_policy(fork, overrides=(("self.deterministic_prefix_caching", True),))
    assert [s.name for s in policy.stages] == ["cap", "cap", "split", "encoder", "reservation"]
    run = cli("trace", fork, "--block", "16", "--prompt", "49", "--budget", "16")
    assert run.code == 2 and "--set self.deterministic_prefix_caching=VALUE" in run.err
    same_verdicts(cli, tmp_path / "on", [fork, *PREFIX_ON], [f"{EQUIVALENTS}:prefix_cache_then_v9"])
    same_verdicts(cli, tmp_path / "off", [fork, *PREFIX_OFF], ["vllm-0.33"])
    run = cli(
        "conform",
        f"{EQUIVALENTS}:prefix_cache_then_v9",
        "--against",
        fork,
        *PREFIX_ON,
        *CONFORM,
        "--json",
    )
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out
    trace = cli(
        "trace",
        fork,
        *PREFIX_ON,
        "--block",
        "16",
        "--lookahead",
        "1",
        "--prompt",
        "40",
        "--budget",
        "64",
        "--json",
    )
    assert trace.json()["steps"][0]["n"] == 32  # stopped at the last full block of the prompt


def _line(path: Path, text: str) -> int:
    content = path.read_text()
    return content[: content.index(text)].count("\n") + 1
