"""Real vLLM code as a POLICY (SPEC CLI POLICY forms), through the command line.

The release tests read cached release source (``release_root``: the wheel is fetched once per
machine), so they carry the ``fidelity`` marker; so do the tests on copies of a release edited
the way a pull request would edit them (:mod:`vllm_copies`). The synthetic-source tests build
small ``scheduler.py`` files (never vLLM text) and run everywhere. Nothing read from a source
file is executed: the methods are interpreted (``chunkproof.source.methods``).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from solver_limits import SOLVER_ARGS
from vllm_copies import (
    READS_SCHEDULER_STATE,
    RESUMED_ONE_TOKEN_AT_A_TIME,
    copy_release,
    patched_release,
    patched_split_start,
)

from chunkproof.model.config import Config
from chunkproof.model.step import step, step_view
from chunkproof.source.extraction import SCHEDULER_FILE
from chunkproof.source.loading import resolve_policy
from chunkproof.source.methods import standin_attributes

TRACE = ["--block", "16", "--lookahead", "3", "--prompt", "49", "--budget", "16"]
QUICK = SOLVER_ARGS
"""Generous per-query solver time: a loaded machine must not turn EQUAL into UNKNOWN."""
SMALL = [
    *("--block", "4,8", "--split-block", "B,B/2", "--lookahead", "0-3", "--drop", "both"),
    *("--prompt", "1-10", "--tokens", "P,P+1", "--start", "0,external", "--max-sched", "1-6"),
]
"""Small ranges of the classic inputs, G != B, resumed requests and external hits."""


def verdicts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A verdicts document's rows by property."""
    return {v["property"]: v for v in document["verdicts"]}


# --- the POLICY forms ------------------------------------------------------------------------


@pytest.mark.fidelity
def test_release_trace_is_spec_k(cli: Cli) -> None:
    """SPEC K on ``vllm==0.33.0``: B=16, L=3, P=T=49, const(16): ends 16, 32, 46, stuck at 46;
    the result names the source's sha256."""
    run = cli("trace", "vllm==0.33.0", *TRACE, "--json")
    document = run.json()
    assert run.code == 1  # stuck: SPEC CLI exit status
    assert document["ends"] == [16, 32, 46]
    assert (document["outcome"], document["stuck_at"]) == ("stuck", 46)
    assert document["source_sha256"] == resolve_policy("vllm==0.33.0").source_sha256


@pytest.mark.fidelity
@pytest.mark.parametrize("command", ["explore", "check"])
def test_release_p1_violation_replays(command: str, tmp_path: Path, cli: Cli) -> None:
    """SPEC K: P1 VIOLATED on ``vllm==0.33.0`` for B=16, L=3; the counterexample names the
    policy and its source sha256 and replays (exit 0)."""
    argv = [command, "vllm==0.33.0", "--property", "P1", "--block", "16", "--lookahead", "3"]
    run = cli(*argv, "--prompt", "1-48", "--out", str(tmp_path), "--json", "--jobs", "1")
    document = run.json()
    sha = resolve_policy("vllm==0.33.0").source_sha256
    assert run.code == 1 and document["source_sha256"] == sha
    assert document["fixed"] == list(resolve_policy("vllm==0.33.0").fixed)
    p1 = verdicts(document)["P1"]
    assert p1["status"] == "VIOLATED" and p1["counterexample"] in document["files"]
    recorded = json.loads(Path(p1["counterexample"]).read_text())
    assert recorded["policy"] == {"name": "vllm==0.33.0", "source_sha256": sha, "options": []}
    assert recorded["config"]["tokens"] == 17  # SPEC K: the smallest T for B=16, L=3
    assert cli("replay", p1["counterexample"]).code == 0


@pytest.mark.fidelity
def test_release_prove_finds_spec_k_minimum(tmp_path: Path, cli: Cli) -> None:
    """The symbolic form of the real methods: Z3 finds the SPEC K minimum T=17 for B=16, L=3."""
    argv = ["prove", "vllm==0.33.0", "--property", "P1", "--block", "16", "--lookahead", "3"]
    run = cli(*argv, "--drop", "off", "--out", str(tmp_path), "--jobs", "1")
    assert run.code == 1 and "T=17 B=16 L=3" in run.out


@pytest.mark.fidelity
def test_directory_and_file_forms(tmp_path: Path) -> None:
    """A directory or scheduler.py path: the release comes from the manifest, vllm/_version.py,
    or nowhere; the composition is read from its schedule() in every case (SPEC X3),
    not from the release number."""
    root = copy_release("0.28.0", tmp_path / "tree", with_manifest=True)
    assert resolve_policy(str(root)).composition == "C5"
    (root / "manifest.json").unlink()
    unversioned = resolve_policy(str(root / SCHEDULER_FILE))
    assert (unversioned.composition, unversioned.releases) == ("C5", ())
    (root / "vllm/_version.py").write_text("__version__ = version = '0.28.0'\n")
    policy = resolve_policy(str(root))
    assert (policy.name, policy.composition, policy.releases) == (str(root), "C5", ("0.28.0",))
    assert policy.source_sha256 == resolve_policy("vllm==0.28.0").source_sha256
    file_policy = resolve_policy(str(root / SCHEDULER_FILE))
    cfg = Config(block=16, prompt=49, max_sched=16, lookahead=1, drop=True, start=16)
    for c, budget in ((16, 16), (32, 7), (48, 16)):
        assert step(file_policy, cfg, c, budget) == step(policy, cfg, c, budget)


@pytest.mark.fidelity
def test_without_reservation_the_source_is_composed_as_027(tmp_path: Path, cli: Cli) -> None:
    """A source of unknown release without ``_reserve_prefill_lookahead`` runs in the
    composition of vllm-0.27 (C4) and equals it."""
    root = copy_release("0.27.0", tmp_path / "tree", with_manifest=False)
    policy = resolve_policy(str(root))
    assert (policy.composition, policy.reservation_variant) == ("C4", None)
    run = cli("conform", "vllm-0.27", "--against", str(root), *SMALL, *QUICK)
    assert run.code == 0 and "EQUAL over" in run.out


@pytest.mark.fidelity
def test_installed_vllm_is_found_through_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """POLICY ``vllm``: the installed distribution, located by importlib.metadata (never
    imported: the tree has no importable vllm package at all)."""
    site = copy_release("0.31.0", tmp_path / "site", with_manifest=False)
    info = site / "vllm-0.31.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n")
    monkeypatch.syspath_prepend(str(site))
    policy = resolve_policy("vllm")
    assert (policy.name, policy.composition, policy.releases) == ("vllm", "C8", ("0.31.0",))
    assert policy.source_sha256 == resolve_policy("vllm==0.31.0").source_sha256
    run = cli("trace", "vllm", *TRACE, "--json")
    assert run.code == 1 and run.json()["ends"] == [16, 32, 46]  # stuck at 46


def test_no_installed_vllm_is_one_line_error(cli: Cli) -> None:
    """POLICY ``vllm`` without an installed distribution: one line, exit 2."""
    try:
        importlib.metadata.distribution("vllm")
        pytest.skip("vllm is installed here")
    except importlib.metadata.PackageNotFoundError:
        pass
    run = cli("trace", "vllm", *TRACE)
    assert (run.code, run.out) == (2, "")
    assert run.err == "chunkproof: error: policy 'vllm': no installed distribution named vllm\n"


# --- --compose -------------------------------------------------------------------------------


@pytest.mark.fidelity
def test_compose_overrides_the_composition(cli: Cli) -> None:
    """0.28.0's split is V5, as in 0.27; composed like 0.27 (C4: no reservation) it is 0.27;
    0.33.0 composed as C4 has no reservation, hence no livelock."""
    run = cli(
        "conform", "vllm-0.27", "--against", "vllm==0.28.0", "--compose", "C4", *SMALL, *QUICK
    )
    assert run.code == 0, run.out
    policy = resolve_policy("vllm==0.28.0", "C4")
    assert (policy.composition, policy.options) == ("C4", ("--compose", "C4"))
    run = cli("trace", "vllm==0.33.0", "--compose", "C4", *TRACE, "--json")
    assert run.json()["outcome"] == "finished"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["trace", "vllm==0.33.0", "--compose", "C42", *TRACE], "unknown composition"),
        (["trace", "vllm-0.33", "--compose", "C4", *TRACE], "--compose applies to real vLLM"),
        (
            ["conform", "vllm-0.33", "--against", "vllm-0.32", "--compose", "C4"],
            "neither 'vllm-0.33' nor 'vllm-0.32' is",
        ),
    ],
)
def test_bad_compose_is_one_line_error(argv: list[str], expected: str, cli: Cli) -> None:
    run = cli(*argv)
    assert (run.code, run.out) == (2, "")
    assert run.err.count("\n") == 1 and expected in run.err


# --- a proposed change to a real release -----------------------------------------------------


@pytest.mark.fidelity
def test_the_fix_written_into_a_release_copy_conforms_to_the_builtin_fix(
    tmp_path: Path, cli: Cli
) -> None:
    """The SPEC V lookahead-in-split fix written into a copy of 0.33.0 is the built-in
    ``lookahead-in-split`` (conform EQUAL, Z3 and grid), and ``check DIR`` gives it the
    built-in fix's verdicts: P1 holds on the explorer's range where 0.33.0 livelocks."""
    fixed = str(patched_release(tmp_path / "fixed"))
    run = cli("conform", "lookahead-in-split", "--against", fixed, *SMALL, *QUICK, "--json")
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out
    features = "--block 8 --split-block B/2 --hash-block G/2 --lookahead 0-3 --prompt 1-12"
    flags = [*features.split(), "--max-sched", "1-6", "--junction", "any", "--start", "0,hash"]
    run = cli("conform", "lookahead-in-split", "--against", fixed, *flags, *QUICK, "--json")
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out

    small = ["--property", "P1", "--block", "4,8", "--lookahead", "0-3", "--prompt", "1-16"]
    small += ["--max-sched", "1-8", "--jobs", "1", "--json"]
    results = {}
    for name in (fixed, "lookahead-in-split", "vllm==0.33.0"):
        run = cli("check", name, *small, "--out", str(tmp_path / "out"))
        results[name] = (run.code, verdicts(run.json())["P1"])
    mine, builtin = results[fixed], results["lookahead-in-split"]
    assert mine[0] == builtin[0]
    for key in ("status", "configs", "violating_configs", "figure"):
        assert mine[1][key] == builtin[1][key], key
    assert mine[1]["summary"].startswith("explorer: PROVED (holds on all")
    assert results["vllm==0.33.0"][1]["violating_configs"] > 0


# --- the stand-ins: every attribute the scheduler and the request have -----------------------


@pytest.mark.fidelity
def test_a_patch_reading_scheduler_state_needs_no_set(tmp_path: Path, cli: Cli) -> None:
    """A patch reading ``self.need_mamba_block_aligned_split``,
    ``self.cache_config.mamba_cache_mode``, ``self.speculative_config.num_speculative_tokens``
    and ``request.num_output_tokens`` runs with no ``--set`` in every form: trace (the
    interpreter), explore (vectorised) and conform (Z3 and grid) against the release, which it
    equals (the patch changes nothing vLLM runs)."""
    root = str(patched_split_start(tmp_path / "neutral", READS_SCHEDULER_STATE))
    run = cli("trace", root, *TRACE, "--json")
    assert (run.code, run.json()["ends"]) == (1, [16, 32, 46])  # stuck at 46
    run = cli("conform", root, "--against", "vllm==0.33.0", *SMALL, *QUICK, "--json")
    assert (run.code, run.json()["status"]) == (0, "EQUAL"), run.out
    argv = ["explore", root, "--block", "8", "--lookahead", "0-3", "--prompt", "1-16"]
    run = cli(*argv, "--tokens", "P,P+2", "--max-sched", "1-8", "--out", str(tmp_path / "o"))
    assert run.code == 1 and "P1 LIVE" in run.out  # the release's livelock, unchanged


@pytest.mark.fidelity
def test_the_attributes_a_patch_reads_hold_the_configuration(tmp_path: Path, cli: Cli) -> None:
    """``request.num_output_tokens`` is T - P and ``self.speculative_config`` is None without
    a lookahead, else holds k = L: a patch acting on them shows the values."""
    root = str(patched_split_start(tmp_path / "acting", RESUMED_ONE_TOKEN_AT_A_TIME))
    base = ["trace", root, "--block", "16", "--prompt", "20", "--budget", "16", "--json"]
    resumed = cli(*base, "--tokens", "23").json()
    assert set(resumed["chunks"]) == {1} and resumed["outcome"] == "finished"
    fresh = cli(*base, "--lookahead", "1").json()
    assert fresh["ends"] == [16, 20]
    mtp = cli(*base, "--lookahead", "3").json()
    assert mtp["chunks"] == [2] * 8 + [1] and mtp["stuck_at"] == 20 - 3  # R1 trims to T - L
    plain = cli(*base).json()
    assert plain["ends"] == [16, 20]
    cfg = Config(block=16, prompt=20, tokens=23, max_sched=16, lookahead=3)
    assert step(resolve_policy(root), cfg, 0, 16).split == 1


def test_standin_attributes_cover_the_scheduler_and_request_state() -> None:
    """The stand-ins carry the scheduler's configuration, not only the model's table: the
    split's gate, the cache mode, the speculative config (None without a lookahead), the
    request's output count and placeholders."""
    cfg = Config(block=16, prompt=40, tokens=43, max_sched=64, lookahead=3, retention=32)
    view = step_view(cfg, 0, lambda function, args: function(*args))
    scheduler, request = standin_attributes(view)
    assert scheduler["need_mamba_block_aligned_split"] is True
    assert scheduler["cache_config.mamba_cache_mode"] == "align"
    assert scheduler["speculative_config.num_speculative_tokens"] == 3
    assert scheduler["cache_config.prefix_cache_retention_interval"] == 32
    assert (request["num_output_tokens"], request["num_output_placeholders"]) == (3, 0)
    plain = step_view(cfg.replace(lookahead=0, retention=-1), 0, lambda f, a: f(*a))
    scheduler, _ = standin_attributes(plain)
    assert scheduler["speculative_config"] is None
    assert scheduler["cache_config.prefix_cache_retention_interval"] is None


# --- --set -----------------------------------------------------------------------------------

SPLIT_HEAD = "class Scheduler:\n    def {name}(self, request, n, local=0, external=0):\n"


def _source(tmp_path: Path, body: str, name: str = "_mamba_block_aligned_split") -> str:
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPLIT_HEAD.format(name=name) + body)
    return str(path)


MIN_CHUNK = (
    "        if self.scheduler_config.min_chunk > n:\n            return 0\n        return n\n"
)


def test_set_gives_an_unmodelled_input_a_value(tmp_path: Path, cli: Cli) -> None:
    """``--set`` reaches the interpreted, vectorised and symbolic forms, and the
    counterexample records it for replay."""
    path = _source(tmp_path, MIN_CHUNK)
    lenient = ["--set", "self.scheduler_config.min_chunk=1"]
    run = cli("trace", path, *TRACE, *lenient, "--json")
    assert run.code == 0 and run.json()["outcome"] == "finished"
    strict = ["--set", "self.scheduler_config.min_chunk=4"]
    run = cli("trace", path, *TRACE, *strict, "--json")
    assert run.json()["stuck_at"] == 48  # the last token is a chunk below 4
    for command in ("explore", "prove"):
        argv = [command, path, "--block", "8", "--lookahead", "0", "--property", "P1"]
        run = cli(*argv, "--prompt", "1-32", *strict, "--out", str(tmp_path / command), "--json")
        verdict = verdicts(run.json())["P1"]
        assert verdict["status"] == "VIOLATED"  # tails below 4 stall
        recorded = json.loads(Path(verdict["counterexample"]).read_text())
        assert recorded["policy"]["options"] == strict
        assert cli("replay", verdict["counterexample"], "--json").code == 0
        assert cli("replay", verdict["counterexample"], *lenient).code == 1


def test_reading_an_unmodelled_input_names_its_set(tmp_path: Path, cli: Cli) -> None:
    """Without ``--set`` the read is a one-line error naming the attribute and the flag, in
    every command (never a silent default)."""
    path = _source(tmp_path, MIN_CHUNK)
    expected = (
        "reads self.scheduler_config.min_chunk, an input chunkproof does not model; give it a "
        "value with --set self.scheduler_config.min_chunk=VALUE"
    )
    small = ["--block", "4", "--lookahead", "0", "--prompt", "1-8", "--max-sched", "1-4"]
    for argv in (
        ["trace", path, *TRACE],
        ["explore", path, *small, "--out", str(tmp_path / "o")],
        ["prove", path, *small, "--out", str(tmp_path / "o"), "--property", "P1"],
        ["conform", path, "--against", "vllm-0.27", *small],
    ):
        run = cli(*argv)
        assert (run.code, run.out) == (2, ""), argv
        assert run.err.count("\n") == 1 and expected in run.err, argv


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("self.cache_config.block_size=4", "a model parameter, set by the configuration"),
        ("self.cache_config=4", "a model parameter, set by the configuration"),
        ("self.speculative_config.num_speculative_tokens=2", "a model parameter"),
        ("request.num_computed_tokens=3", "a model parameter"),
        ("request.num_output_tokens=3", "a model parameter"),
        ("x=4", "expected self.NAME=VALUE or request.NAME=VALUE"),
        ("self.scheduler_config.min_chunk=four", "the value must be an integer"),
    ],
)
def test_bad_set_is_one_line_error(flag: str, expected: str, tmp_path: Path, cli: Cli) -> None:
    run = cli("trace", _source(tmp_path, MIN_CHUNK), *TRACE, "--set", flag)
    assert (run.code, run.out) == (2, "")
    assert run.err.count("\n") == 1 and expected in run.err


def test_set_applies_to_source_only(cli: Cli) -> None:
    run = cli("trace", "vllm-0.33", *TRACE, "--set", "self.scheduler_config.min_chunk=4")
    assert run.code == 2 and "--set applies to real vLLM source" in run.err


# --- bad and synthetic sources ---------------------------------------------------------------

BAD_SOURCES = {
    "no methods": (
        "class Scheduler:\n    def schedule(self):\n        return 0\n",
        "class Scheduler has no method _mamba_block_aligned_split",
    ),
    "renamed": (
        SPLIT_HEAD.format(name="_block_aligned_split") + "        return n\n",
        "class Scheduler has no method _mamba_block_aligned_split",
    ),
    "syntax error": (
        SPLIT_HEAD.format(name="_mamba_block_aligned_split") + "        return n +\n",
        ":3: syntax error",
    ),
    "for loop": (
        SPLIT_HEAD.format(name="_mamba_block_aligned_split")
        + "        for _ in range(2):\n            n = n // 2\n        return n\n",
        ":3: For is outside the policy subset",
    ),
    "wrong signature": (
        "class Scheduler:\n    def _mamba_block_aligned_split(self, request, n):\n"
        "        return n\n",
        "_mamba_block_aligned_split has an unexpected signature (self, request, n)",
    ),
    "unmodelled attribute": (
        SPLIT_HEAD.format(name="_mamba_block_aligned_split") + "        return self.foo\n",
        "reads self.foo, an input chunkproof does not model; give it a value with "
        "--set self.foo=VALUE",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_is_one_line_error(case: str, tmp_path: Path, cli: Cli) -> None:
    """A scheduler.py the tool cannot use: one line on stderr naming the file, and exit 2."""
    text, expected = BAD_SOURCES[case]
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    run = cli("trace", str(path), *TRACE)
    assert (run.code, run.out) == (2, "")
    assert run.err.count("\n") == 1 and run.err.startswith("chunkproof: error: ")
    assert expected in run.err
    if case != "unmodelled attribute":
        assert str(path) in run.err


def test_missing_directory_layout_is_one_line_error(tmp_path: Path, cli: Cli) -> None:
    """A directory without vllm/v1/core/sched/scheduler.py: one line and exit 2."""
    run = cli("trace", str(tmp_path), *TRACE)
    assert run.code == 2 and run.err.count("\n") == 1
    assert "no vllm/v1/core/sched/scheduler.py" in run.err


def test_synthetic_source_runs_in_every_form(tmp_path: Path, cli: Cli) -> None:
    """A synthetic split (floor to the split grid, an ``is None`` test, a property of the
    scheduler, a helper) as POLICY: trace (interpreted), explore (vectorised) and conform
    against itself (Z3 and grid) agree."""
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(
        "def floor_to(x, b):\n    return x // b * b\n\n\n"
        + SPLIT_HEAD.format(name="_mamba_block_aligned_split")
        + "        start = request.num_computed_tokens + local + external\n"
        + "        if self.mamba_prefill_checkpoint_alignment is not None:\n"
        + "            return 0\n"
        + "        end = floor_to(start + n, self._grid)\n"
        + "        return n if start + n >= request.num_tokens else max(end - start, 0)\n\n"
        + "    @property\n    def _grid(self):\n        return self.cache_config.block_size\n"
    )
    run = cli("trace", str(path), *TRACE, "--json")
    assert (run.code, run.json()["ends"]) == (0, [16, 32, 48, 49])
    run = cli("trace", str(path), *TRACE, "--checkpoints", "--json")
    assert run.json()["outcome"] == "stuck"  # alpha = 1: not None
    small = ["--block", "4,8", "--split-block", "B,B/2", "--lookahead", "0-2"]
    small += ["--prompt", "1-12", "--max-sched", "1-6"]
    run = cli("explore", str(path), *small, "--out", str(tmp_path / "o"), "--json")
    assert run.code in (0, 1) and verdicts(run.json())["P0"]["status"] == "PROVED"
    run = cli("conform", str(path), "--against", str(path), *small, *QUICK)
    assert run.code == 0 and run.out.splitlines()[4] == "EQUAL over"
