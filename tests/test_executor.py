"""``--executor`` (SPEC CLI): the explorer's batches and the prover's cells on a Dask
cluster give the verdicts of the local run, for a built-in policy and for a policy read from a
file (which reaches the workers as validated syntax trees, never as code to import); a bad
address, or Dask missing, is a one-line error with exit status 2."""

from __future__ import annotations

import ast
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli

from chunkproof.checker.cli.defaults import user_space
from chunkproof.checker.engines import executor
from chunkproof.source.loading import resolve_policy
from chunkproof.spec.request import RequestModel

distributed = pytest.importorskip("distributed")

RANGES = ["--block", "4", "--prompt", "1-12", "--lookahead", "0-2"]
FILE_POLICY = f"{Path(__file__).parent / 'fixtures' / 'forks' / 'equivalents.py'}:device_grid_split"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A Dask cluster of two single-threaded worker processes: its ``dask://`` address."""
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        yield "dask://" + cluster.scheduler_address.removeprefix("tcp://")


def results(tmp_path: Path, *argv: str) -> dict[str, Any]:
    """The JSON document of a run in a process of its own (the prover's minimal counterexample
    may depend on what Z3 solved before in the same process), without timings and file
    paths."""
    command = [sys.executable, "-m", "chunkproof", *argv, *RANGES, "--out", str(tmp_path)]
    run = subprocess.run([*command, "--json"], capture_output=True, text=True, check=False)
    assert run.returncode in (0, 1) and run.stdout, run.stderr
    document: dict[str, Any] = without_paths(json.loads(run.stdout))
    return document


def without_paths(value: Any) -> Any:
    """``value`` without timings and the paths of the files a run wrote."""
    if isinstance(value, dict):
        dropped = ("seconds", "files", "counterexample", "picture")
        return {
            k: without_paths(v)
            for k, v in value.items()
            if k not in dropped and not k.startswith("seconds_")
        }
    if isinstance(value, list):
        return [without_paths(v) for v in value]
    return value


@pytest.mark.parametrize(
    "argv",
    [
        ["explore", "vllm-0.33"],
        ["prove", "vllm-0.33"],
        ["explore", FILE_POLICY],
        ["prove", FILE_POLICY, "--property", "P0,P1,P4"],
    ],
)
def test_a_dask_cluster_gives_the_local_results(
    tmp_path: Path, scheduler: str, argv: list[str]
) -> None:
    local = results(tmp_path / "local", *argv, "--jobs", "1")
    remote = results(tmp_path / "dask", *argv, "--executor", scheduler)
    assert remote == local
    assert {v["status"] for v in local["verdicts"]} >= {"VIOLATED", "PROVED"}


def test_a_cluster_of_jobs_workers_gives_the_local_results(tmp_path: Path) -> None:
    argv = ["explore", "vllm-0.33", "--property", "P1,P5"]
    local = results(tmp_path / "local", *argv, "--jobs", "2")
    started = results(tmp_path / "dask", *argv, "--jobs", "2", "--executor", "dask")
    assert started == local


def test_a_policy_travels_as_syntax_trees_only() -> None:
    """What a worker receives for a policy read from a file loads with nothing but chunkproof's
    own classes (the file is never imported); any other global is refused."""
    policy = resolve_policy(FILE_POLICY)
    model = RequestModel(policy, user_space({"block": "4"}, None, production=False))
    loaded = executor.safe_loads(pickle.dumps((model, ("P1",))))[0]
    split, original = loaded.policy.stage("split"), policy.stage("split")
    assert split is not None and original is not None
    assert ast.dump(split.subset().node) == ast.dump(original.subset().node)
    assert not any("equivalents" in name for name in sys.modules)
    with pytest.raises(pickle.UnpicklingError, match=r"does not load posix\.system"):
        executor.safe_loads(pickle.dumps(os.system))


def bad_input(cli: Cli, tmp_path: Path, executor_text: str) -> str:
    run = cli("explore", "vllm-0.33", *RANGES, "--out", str(tmp_path), "--executor", executor_text)
    assert run.code == 2, run.err
    assert len(run.err.strip().splitlines()) == 1, run.err
    return run.err


def test_an_unreachable_scheduler_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "CONNECT_SECONDS", 1)
    err = bad_input(cli, tmp_path, "dask://127.0.0.1:1")
    assert err.startswith("chunkproof: error: --executor dask://127.0.0.1:1: no Dask scheduler")


def test_dask_missing_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert "pip install 'chunkproof[dask]'" in bad_input(cli, tmp_path, "dask")


def test_an_executor_that_is_not_one_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    assert "is not local, dask or dask://HOST:PORT" in bad_input(cli, tmp_path, "spark://x:1")


def test_a_task_the_cluster_loses_is_an_incomplete_run() -> None:
    """A connection to the cluster that closes under a task is one line with exit status 3,
    not a traceback."""

    class Lost:
        def result(self) -> None:
            raise distributed.comm.CommClosedError("in <TCP (closed)>: Stream is closed")

    class Client:
        def scatter(self, data: list[bytes], **kwargs: Any) -> list[str]:
            return ["stored"]

        def submit(self, *args: Any, **kwargs: Any) -> Lost:
            return Lost()

        def cancel(self, futures: list[Any]) -> None:
            pass

    with pytest.raises(executor.ExecutorError, match="the run is incomplete") as caught:
        list(executor.DaskExecutor(Client()).map(len, (), [1, 2]))
    assert caught.value.exit_code == 3


def test_an_os_error_inside_a_task_is_named_as_the_tasks() -> None:
    """An OSError a task raises on its worker (a certificate it cannot write) is the task's
    failure, not the cluster's: one line, exit 3."""

    class Failed:
        status = "error"

        def result(self) -> None:
            raise PermissionError("[Errno 13] Permission denied: 'certificates/P1.smt2'")

    class Client:
        def scatter(self, data: list[bytes], **kwargs: Any) -> list[str]:
            return ["stored"]

        def submit(self, *args: Any, **kwargs: Any) -> Failed:
            return Failed()

        def cancel(self, futures: list[Any]) -> None:
            pass

    with pytest.raises(executor.ExecutorError, match="a task failed on a Dask worker") as caught:
        list(executor.DaskExecutor(Client()).map(len, (), [1]))
    assert "Permission denied" in str(caught.value) and caught.value.exit_code == 3


def test_a_worker_with_other_chunkproof_modules_refuses_its_tasks(
    scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task carries the digest of the client's chunkproof modules; a worker whose own
    modules differ (another version, an edited checkout) refuses it: one line, exit 3, no
    result computed by other code."""
    address = "tcp://" + scheduler.removeprefix(executor.DASK_PREFIX)
    with distributed.Client(address) as client:
        assert list(executor.DaskExecutor(client).map(len, (), ["ab", "c"])) == [2, 1]
        monkeypatch.setattr(executor, "build", lambda: "another build")
        with pytest.raises(executor.ExecutorError, match="another chunkproof") as caught:
            list(executor.DaskExecutor(client).map(len, (), ["ab"]))
    assert caught.value.exit_code == 3
