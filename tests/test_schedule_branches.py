"""The branches of ``schedule()`` a report lists (SPEC X3): each one that sets a chunk, moves
requests or ends a loop, as modelled, held fixed or not modelled, and those new or changed
since the release it is compared with.

The fingerprint table (``source/schedule_branches.json``) must be each built-in release's own,
so a stale table fails here. vLLM 0.34.0's ``schedule()`` changes (the per-step threshold gated
on chunked prefill, the cache-aware reordering of the waiting queue, the asynchronous-KV queue
and its ``loads_only`` passes, the zero of a prompt the encoder cache would split with chunked
prefill off, the parked-load reservation) are each named, and none is left unclassified. The
tests read cached release trees, so they carry the ``fidelity`` marker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from vllm_copies import _edit, copy_release

from chunkproof.model.builtin import builtin_policies
from chunkproof.source.branches import fingerprint_table, release_fingerprints
from chunkproof.source.loading import resolve_policy

pytestmark = pytest.mark.fidelity

RELEASES = [p.releases[0] for p in builtin_policies() if p.releases]
SMALL = ["--block", "4", "--lookahead", "0-2", "--prompt", "1-12", "--max-sched", "1-8"]


@pytest.mark.parametrize("version", RELEASES)
def test_the_fingerprint_table_is_each_release_own(version: str) -> None:
    assert fingerprint_table()[version] == release_fingerprints(version)


@pytest.mark.parametrize("version", RELEASES)
def test_a_release_is_fully_classified_and_fixes_what_its_builtin_names(version: str) -> None:
    """Every branch of each release's ``schedule()`` is modelled or held fixed, and the
    policy read from it fixes the same inputs as its built-in model, in the words its own
    source calls for (no other release's)."""
    policy = resolve_policy(f"vllm=={version}")
    builtin = next(p for p in builtin_policies() if version in p.releases)
    assert policy.branches and all(b.status != "not modelled" for b in policy.branches)
    assert set(policy.fixed) == set(builtin.fixed)
    assert policy.composition == builtin.composition


def test_check_of_0_34_names_each_schedule_change(tmp_path: Path, cli: Cli) -> None:
    run = cli("check", "vllm==0.34.0", *SMALL, "--property", "P1", "--out", str(tmp_path))
    assert run.code == 1, run.err
    lines = run.out.splitlines()
    start = lines.index("  new or changed since vLLM 0.33.0: 10")
    changed = lines[start + 1 : start + 11]
    assert "0 not modelled" in lines[start - 1]
    expected = [
        ("enable_chunked_prefill and num_eligible_reqs", "modelled", "chunked prefill on"),
        ("self.cache_aware_window", "held fixed", "cache_aware_admission_window 0"),
        ("True: one of the two loops", "modelled", ""),
        ("take_async_kv", "held fixed", "max_num_inflight_kv_loads unset"),
        ("loads_only", "held fixed", "a pass with no seat or budget left ends the loop"),
        ("_admits_inflight_kv_load", "held fixed", "load_kv_async False"),
        ("request_queue is not self.async_kv_waiting", "held fixed", "no asynchronous KV"),
        ("request.has_encoder_inputs and (not self.sch", "held fixed", "no-chunked-prefill zero"),
        ("load_kv_async:", "held fixed", "load synchronously"),
        ("step_skipped_async_kv", "held fixed", "no asynchronous KV load waits"),
    ]
    assert len(changed) == len(expected)
    for line, (test, status, why) in zip(changed, expected, strict=True):
        assert test in line and f"  {status}  " in line and why in line, line
    assert "0.33" not in lines[1]  # the fixed: line is the release's own


def test_a_json_document_lists_every_branch(tmp_path: Path, cli: Cli) -> None:
    argv = ["explore", "vllm==0.34.0", *SMALL, "--property", "P1", "--out", str(tmp_path)]
    document = cli(*argv, "--json").json()
    listed = document["schedule_branches"]
    assert listed["since"] == "0.33.0"
    assert len(listed["branches"]) == 50
    assert sum(b["changed"] for b in listed["branches"]) == 10
    assert {b["status"] for b in listed["branches"]} == {"modelled", "held fixed"}


def test_a_pull_request_is_compared_with_its_own_release(tmp_path: Path, cli: Cli) -> None:
    """A checkout of 0.33.0 with a new branch that moves requests: the report compares it
    with 0.33.0 itself and lists the branch as new and not modelled."""
    root = copy_release("0.33.0", tmp_path / "tree", with_manifest=True)
    drain = (
        "        self.current_step += 1\n"
        "        if self.scheduler_config.drain_running:\n"
        "            self.waiting.prepend_requests(list(self.running))\n"
    )
    _edit(root, [("        self.current_step += 1\n", drain)])
    run = cli("explore", str(root), *SMALL, "--property", "P1", "--out", str(tmp_path / "out"))
    assert run.code == 1, run.err
    lines = run.out.splitlines()
    start = lines.index("  new or changed since vLLM 0.33.0: 1")
    assert "1 not modelled" in lines[start - 1]
    new = lines[start + 1]
    assert "not modelled" in new and "drain_running: moves requests" in new


def test_system_lists_the_branches_too(tmp_path: Path, cli: Cli) -> None:
    """The scheduler step's report, where queue changes matter most, names them as well."""
    run = cli("system", "vllm==0.34.0", "--out", str(tmp_path))
    assert run.code == 1, run.err
    assert "  new or changed since vLLM 0.33.0: 10" in run.out.splitlines()
    document = cli("system", "vllm==0.34.0", "--out", str(tmp_path), "--json").json()
    assert len(document["schedule_branches"]["branches"]) == 50
