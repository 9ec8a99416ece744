"""Real vLLM code as a POLICY (SPEC CLI POLICY forms; the issue "Check real vLLM code").

The release tests read each release's cached source (``release_root``: the wheel is fetched once
per machine), so they carry the ``fidelity`` marker. The bad-source tests build small synthetic
``scheduler.py`` files (never vLLM text) and run everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_copies import copy_release, patched_release

from chunkproof.checker.cli import main
from chunkproof.model.builtin import builtin_policies, policy_for_release
from chunkproof.model.extraction import SCHEDULER_FILE
from chunkproof.model.loading import resolve_policy

RELEASES = tuple(p.releases[0] for p in builtin_policies() if p.releases)
"""The first release of every built-in variant."""
TRACE = ["--block", "16", "--lookahead", "3", "--prompt", "49", "--budget", "16"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The CLI's exit status, stdout and stderr."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


# --- real releases ---------------------------------------------------------------------------


@pytest.mark.fidelity
@pytest.mark.parametrize("version", RELEASES)
def test_builtin_variant_conforms_to_release(
    version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """conform: each release's built-in variant equals its real methods over the production
    range (Z3) and the small grid."""
    builtin = policy_for_release(version).name
    status, out, _ = run(["conform", builtin, "--against", f"vllm=={version}", "--json"], capsys)
    document = json.loads(out)
    assert (status, document["status"], document["difference"]) == (0, "EQUAL", None)
    assert document["range"]["z3"]["cells"] == 126
    assert document["range"]["grid"]["configs"] > 0
    assert len(document["source_sha256"][f"vllm=={version}"]) == 64


@pytest.mark.fidelity
def test_conform_reports_one_concrete_difference(capsys: pytest.CaptureFixture[str]) -> None:
    """Different releases: exit 1 and one input with both chunks, which a trace confirms."""
    argv = ["conform", "vllm-0.26", "--against", "vllm==0.33.0", "--block", "16"]
    status, out, _ = run([*argv, "--lookahead", "3", "--json"], capsys)
    difference = json.loads(out)["difference"]
    assert status == 1 and difference["chunk_a"] != difference["chunk_b"]
    status, out, _ = run([*argv, "--lookahead", "3"], capsys)
    assert status == 1 and "DIFFERENT at B=16 L=3" in out.splitlines()[-1]


@pytest.mark.fidelity
def test_spec_k_trace_on_release(capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC K: vllm==0.33.0, B=16, L=3, P=T=49, const(16): ends 16, 32, 46, stuck at 46."""
    status, out, _ = run(["trace", "vllm==0.33.0", *TRACE, "--json"], capsys)
    document = json.loads(out)
    assert status == 0
    assert document["ends"] == [16, 32, 46]
    assert (document["outcome"], document["stuck_at"]) == ("stuck", 46)
    assert document["source_sha256"] == resolve_policy("vllm==0.33.0").source_sha256


@pytest.mark.fidelity
@pytest.mark.parametrize("command", ["explore", "check"])
def test_p1_violation_on_release_replays(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SPEC K: P1 VIOLATED for B=16, L=3 (smallest T=17); the counterexample file names the
    source sha256 and replays (exit 0)."""
    argv = [command, "vllm==0.33.0", "--property", "P1", "--block", "16", "--lookahead", "3"]
    status, out, _ = run([*argv, "--out", str(tmp_path), "--json", "--jobs", "1"], capsys)
    document = json.loads(out)
    sha = resolve_policy("vllm==0.33.0").source_sha256
    assert status == 1 and document["source_sha256"] == sha
    p1 = [v for v in document["verdicts"] if v["property"] == "P1"]
    assert {v["status"] for v in p1} == {"VIOLATED"}
    for verdict in p1:
        recorded = json.loads(Path(verdict["counterexample"]).read_text())
        assert recorded["policy"] == {"name": "vllm==0.33.0", "source_sha256": sha, "options": []}
        assert run(["replay", verdict["counterexample"]], capsys)[0] == 0


@pytest.mark.fidelity
def test_prove_on_release_finds_spec_k_minimum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The symbolic form of the real methods: Z3 finds the SPEC K minimum T=17 for B=16, L=3."""
    argv = ["prove", "vllm==0.33.0", "--property", "P1", "--block", "16", "--lookahead", "3"]
    status, out, _ = run([*argv, "--drop", "off", "--out", str(tmp_path), "--jobs", "1"], capsys)
    assert status == 1 and "T=17 B=16 L=3" in out


@pytest.mark.fidelity
def test_a_proposed_change_gets_a_verdict_in_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = str(patched_release(tmp_path / "fixed"))
    status, out, _ = run(
        ["check", fixed, "--property", "P1", "--json", "--out", str(tmp_path)], capsys
    )
    (verdict,) = json.loads(out)["verdicts"]
    assert (status, verdict["status"]) == (0, "PROVED")
    status, out, _ = run(["conform", "lookahead-in-split", "--against", fixed], capsys)
    assert status == 0, out


@pytest.mark.fidelity
def test_directory_and_file_forms(tmp_path: Path) -> None:
    """A directory or scheduler.py path: the release comes from the manifest, vllm/_version.py,
    or else the source (reservation present: the composition of vllm-latest)."""
    root = copy_release("0.28.0", tmp_path / "tree", with_manifest=True)
    assert resolve_policy(str(root)).composition == "C5"
    (root / "manifest.json").unlink()
    assert resolve_policy(str(root / SCHEDULER_FILE)).composition == "C9"
    (root / "vllm/_version.py").write_text("__version__ = version = '0.28.0'\n")
    policy = resolve_policy(str(root))
    assert (policy.name, policy.composition, policy.releases) == (str(root), "C5", ("0.28.0",))
    assert policy.source_sha256 == resolve_policy("vllm==0.28.0").source_sha256


@pytest.mark.fidelity
def test_installed_vllm_is_found_through_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POLICY ``vllm``: the installed distribution, located by importlib.metadata."""
    site = copy_release("0.31.0", tmp_path / "site", with_manifest=False)
    info = site / "vllm-0.31.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n")
    monkeypatch.syspath_prepend(str(site))
    policy = resolve_policy("vllm")
    assert (policy.name, policy.composition, policy.releases) == ("vllm", "C8", ("0.31.0",))


# --- bad sources -----------------------------------------------------------------------------

SPLIT_HEAD = "class Scheduler:\n    def {name}(self, request, n, local=0, external=0):\n"
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
    "unmodelled attribute": (
        SPLIT_HEAD.format(name="_mamba_block_aligned_split") + "        return self.foo\n",
        "reads self.foo, an input chunkproof does not model; give it a value with "
        "--set self.foo=VALUE",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_is_one_line_error(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scheduler.py the tool cannot use: one line on stderr naming the file, and exit 2."""
    text, expected = BAD_SOURCES[case]
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    status, out, err = run(["trace", str(path), *TRACE], capsys)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("chunkproof: error: ")
    assert expected in err
    if case != "unmodelled attribute":
        assert str(path) in err


def test_missing_directory_layout_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory without vllm/v1/core/sched/scheduler.py: one line and exit 2."""
    status, _, err = run(["trace", str(tmp_path), *TRACE], capsys)
    assert status == 2 and err.count("\n") == 1 and "no vllm/v1/core/sched/scheduler.py" in err


def test_synthetic_source_runs_in_every_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A synthetic split (floor to a block, ``is None`` test) as POLICY: trace (native),
    explore (vectorised) and conform against itself (Z3 and grid) agree."""
    path = tmp_path / SCHEDULER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(
        SPLIT_HEAD.format(name="_mamba_block_aligned_split")
        + "        start = request.num_computed_tokens\n"
        + "        if self.mamba_prefill_checkpoint_alignment is not None:\n"
        + "            return 0\n"
        + "        block = self.cache_config.block_size\n"
        + "        end = (start + n) // block * block\n"
        + "        return n if start + n >= request.num_tokens else max(end - start, 0)\n"
    )
    status, out, _ = run(["trace", str(path), *TRACE, "--json"], capsys)
    assert (status, json.loads(out)["ends"]) == (0, [16, 32, 48, 49])
    status, out, _ = run(["conform", str(path), "--against", "vllm-0.27", "--block", "16"], capsys)
    assert status in (0, 1) and out.splitlines()[-1].startswith(("EQUAL", "DIFFERENT"))
    status, out, _ = run(["conform", str(path), "--against", str(path), "--block", "16"], capsys)
    assert status == 0 and out.splitlines()[-1].startswith("EQUAL over Z3: ")


@pytest.mark.fidelity
def test_compose_overrides_the_composition(capsys: pytest.CaptureFixture[str]) -> None:
    # 0.28.0's split is V5, as in 0.27; composed like 0.27 (C4: no reservation) it is 0.27.
    status, out, _ = run(
        ["conform", "vllm-0.27", "--against", "vllm==0.28.0", "--compose", "C4",
         "--block", "16", "--lookahead", "0-3"],
        capsys,
    )  # fmt: skip
    assert status == 0, out
    status, out, _ = run(["trace", "vllm==0.33.0", "--compose", "C4", *TRACE, "--json"], capsys)
    assert json.loads(out)["outcome"] == "finished"  # no reservation, no livelock


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "vllm==0.33.0", "--compose", "C42", *TRACE],
        ["trace", "vllm-0.33", "--compose", "C4", *TRACE],
    ],
)
def test_bad_compose_is_one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(argv, capsys)
    assert status == 2
    assert len(err.strip().splitlines()) == 1


def test_set_gives_an_unmodelled_input_a_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--set`` reaches the native, vectorised and symbolic forms; a model parameter or a
    built-in policy cannot be set."""
    path = tmp_path / "scheduler.py"
    path.write_text(
        SPLIT_HEAD.format(name="_mamba_block_aligned_split")
        + "        if self.scheduler_config.min_chunk > n:\n"
        + "            return 0\n"
        + "        return n\n"
    )
    lenient = ["--set", "self.scheduler_config.min_chunk=1"]
    status, out, _ = run(["trace", str(path), *TRACE, *lenient, "--json"], capsys)
    assert status == 0 and json.loads(out)["outcome"] == "finished"
    flags = ["--set", "self.scheduler_config.min_chunk=4"]
    status, out, _ = run(["trace", str(path), *TRACE, *flags, "--json"], capsys)
    assert json.loads(out)["stuck_at"] == 48  # the last token is a chunk below 4
    for command in ("explore", "prove"):
        argv = [command, str(path), "--block", "8", "--lookahead", "0", "--property", "P1"]
        status, out, _ = run([*argv, *flags, "--out", str(tmp_path), "--json"], capsys)
        verdict = json.loads(out)["verdicts"][0]
        assert verdict["status"] == "VIOLATED"  # tails below 4 stall
        status, out, _ = run(["replay", verdict["counterexample"], "--json"], capsys)
        assert status == 0  # the file records the --set it was found with
    for bad in (["--set", "self.cache_config.block_size=4"], ["--set", "x=4"]):
        status, _, err = run(["trace", str(path), *TRACE, *bad], capsys)
        assert status == 2 and err.count("\n") == 1
    status, _, err = run(["trace", "vllm-0.33", *TRACE, *flags], capsys)
    assert status == 2 and "--set applies to real vLLM source" in err
