"""Where the engines' work runs (``--executor``): in this process, on a local fork pool of
``--jobs`` processes, or on a Dask cluster.

Every executor runs ``function(*shared, item)`` for each item and yields the results in item
order, so that the callers merge them in one order whatever the executor and ``--jobs`` (a tie
between equal figures goes the same way: the results are identical). ``shared`` (the models,
the prover's settings) reaches each worker once. The fork pool inherits it. A Dask worker is
another process, maybe on another machine: it receives ``shared`` and every item as pickled
bytes and loads them with :func:`safe_loads`, which admits only chunkproof's own classes and
functions, numpy arrays, syntax tree nodes and a few standard data types. A policy read from a
user's file travels as what chunkproof built from it, validated syntax trees that only the
subset interpreter runs (:mod:`chunkproof.model.subset`): a worker never imports or executes
the user's file, and needs neither it nor vLLM's source, only the same chunkproof installed
(checked: each task carries the digest of the client's modules, which a worker with other
modules refuses).
"""

from __future__ import annotations

import functools
import hashlib
import io
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol, TypeVar

from chunkproof.model.errors import EXIT_UNKNOWN, ChunkproofError
from chunkproof.proofs.isolated import held_signals, quiet_child

R = TypeVar("R")

LOCAL = "local"
DASK = "dask"
DASK_PREFIX = "dask://"
CONNECT_SECONDS = 10
"""How long connecting to a Dask scheduler may take before it is an error."""
KEPT_CONTEXTS = 4
"""Shared arguments a Dask worker keeps loaded (the runs it serves at once)."""


class Executor(Protocol):
    """Runs ``function(*shared, item)`` for every item."""

    def map(
        self,
        function: Callable[..., R],
        shared: tuple[Any, ...],
        items: Sequence[Any],
    ) -> Iterator[R]:
        """The results, in item order."""
        ...


class Serial:
    """Every item in this process, in order."""

    def map(
        self,
        function: Callable[..., R],
        shared: tuple[Any, ...],
        items: Sequence[Any],
    ) -> Iterator[R]:
        """``function(*shared, item)`` for every item."""
        return (function(*shared, item) for item in items)


def usable_jobs(jobs: int) -> int:
    """``--jobs`` capped at the cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(jobs, cores))


def _serve(
    function: Callable[..., Any], shared: tuple[Any, ...], channel: Connection, parent: int
) -> None:
    """A pool worker: ``function(*shared, item)`` for each ``(index, item)`` the parent sends,
    answered by ``(index, True, result)``, or ``(index, False, exception)`` when the call
    raises; it ends when the channel closes (the parent kills it first: :func:`_stop_workers`)."""
    quiet_child(parent)
    while True:
        try:
            index, item = channel.recv()
        except EOFError:
            return
        try:
            answer: tuple[int, bool, Any] = (index, True, function(*shared, item))
        except Exception as exc:
            answer = (index, False, _sendable(exc))
        try:
            channel.send(answer)
        except Exception as exc:  # a result that does not pickle (nothing was sent)
            where = f"a pool worker could not send its result back: {type(exc).__name__}: {exc}"
            channel.send((index, False, ExecutorError(where)))


def _sendable(exc: Exception) -> Exception:
    """``exc`` if it survives the trip to the parent, else an :class:`ExecutorError` naming it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return ExecutorError(f"a pool worker failed: {type(exc).__name__}: {exc}")
    return exc


@dataclass
class _Worker:
    """One worker process of a :class:`LocalPool` and the parent's end of its channel."""

    process: BaseProcess
    channel: Connection
    index: int | None = None
    """The item it computes, ``None`` when idle."""


@dataclass(frozen=True)
class LocalPool:
    """A fork pool of ``jobs`` processes (capped by :func:`usable_jobs`); the workers inherit
    ``function`` and ``shared`` (policies hold functions and syntax trees: nothing is pickled
    but the items and the results). One job, or one item, runs serially.

    The pool has no threads: the parent hands out items and waits on the workers' channels
    itself, so a signal (SIGTERM, Ctrl-C) interrupts only that wait, never a lock or a
    thread of the pool, and however the iteration ends the workers are killed (SIGKILL, no
    handler of theirs runs) and reaped. A worker that dies before answering is an
    :class:`ExecutorError`: the run is incomplete."""

    jobs: int

    def map(
        self,
        function: Callable[..., R],
        shared: tuple[Any, ...],
        items: Sequence[Any],
    ) -> Iterator[R]:
        """``function(*shared, item)`` for every item on the pool."""
        jobs = usable_jobs(self.jobs)
        if jobs <= 1 or len(items) < 2:
            yield from Serial().map(function, shared, items)
            return
        workers: list[_Worker] = []
        try:
            _start_workers(workers, min(jobs, len(items)), function, shared)
            yield from _results_in_order(workers, items)
        finally:
            _stop_workers(workers)


def _start_workers(
    workers: list[_Worker], count: int, function: Callable[..., Any], shared: tuple[Any, ...]
) -> None:
    """Fork ``count`` workers into ``workers`` with the stopping signals held
    (:func:`~chunkproof.proofs.isolated.held_signals`: one that comes meanwhile is handled once
    every started worker is in ``workers``)."""
    context = multiprocessing.get_context("fork")
    with held_signals():
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(
                target=_serve, args=(function, shared, theirs, os.getpid()), daemon=True
            )
            process.start()
            workers.append(_Worker(process, mine))
            theirs.close()


def _results_in_order(workers: list[_Worker], items: Sequence[Any]) -> Iterator[Any]:
    """Every item's result, in item order: each idle worker gets the next item, the results
    that come early wait for the ones before them; an item whose call raised raises here."""
    answers: dict[int, tuple[bool, Any]] = {}
    handed = done = 0
    while done < len(items):
        for worker in workers:
            if worker.index is None and handed < len(items):
                worker.channel.send((handed, items[handed]))
                worker.index, handed = handed, handed + 1
        _collect(workers, answers)
        while done in answers:
            ok, value = answers.pop(done)
            if not ok:
                raise value
            yield value
            done += 1


def _collect(workers: list[_Worker], answers: dict[int, tuple[bool, Any]]) -> None:
    """Wait until a busy worker answers (or dies) and put every answer there is in
    ``answers``: a worker that died before answering is an :class:`ExecutorError`."""
    busy = [worker for worker in workers if worker.index is not None]
    ready = wait([worker.channel for worker in busy] + [w.process.sentinel for w in busy])
    for worker in busy:
        if worker.channel in ready or worker.process.sentinel in ready:
            try:
                index, ok, value = worker.channel.recv()
            except EOFError:
                worker.process.join(timeout=10)  # its pipe closed as it died: reap it
                raise ExecutorError(
                    f"a pool worker died (exit status {worker.process.exitcode}) before it "
                    "answered, the run is incomplete"
                ) from None
            answers[index] = (ok, value)
            worker.index = None


def _stop_workers(workers: list[_Worker]) -> None:
    """Kill and reap every worker (an idle one holds nothing; a busy one's work is dropped)."""
    for worker in workers:
        worker.process.kill()
    for worker in workers:
        worker.process.join()
        worker.channel.close()


def as_executor(jobs: int | Executor) -> Executor:
    """An executor as given, or the local pool of ``jobs`` processes."""
    return LocalPool(jobs) if isinstance(jobs, int) else jobs


# -- Dask ---------------------------------------------------------------------------------------

_SAFE_MODULES = ("ast", "_ast", "chunkproof")
_SAFE_NAMES = {
    "builtins": {"Ellipsis"},
    "collections": {"ChainMap"},
    "pathlib": {"PosixPath"},
    "numpy": {"ndarray", "dtype", "scalar", "_reconstruct", "_frombuffer"},
}


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that loads chunkproof's own classes and functions, syntax tree nodes,
    numpy arrays and the standard data types of :data:`_SAFE_NAMES`, and refuses every other
    global (a user module, ``os.system``, ``builtins.eval``)."""

    def find_class(self, module: str, name: str) -> Any:
        top = module.partition(".")[0]
        if top in _SAFE_MODULES or name in _SAFE_NAMES.get(top, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"chunkproof does not load {module}.{name} on a worker")


def safe_loads(data: bytes) -> Any:
    """Unpickle what chunkproof sends a worker (module docstring)."""
    return _SafeUnpickler(io.BytesIO(data)).load()


_LOADED: dict[str, tuple[Any, ...]] = {}
PACKAGES = ("", "model", "spec", "proofs", "checker")
"""chunkproof's packages, as folders of its root (pyproject.toml)."""


@functools.cache
def build() -> str:
    """A digest of chunkproof's own modules (their paths and contents): a worker computes the
    engines' results with the client's code only if its digest is the client's."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).glob("*.py")):
            digest.update(f"{package}/{path.name}".encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _run_remote(
    function: Callable[..., Any], client_build: str, digest: str, shared: bytes, item: bytes
) -> Any:
    """On a Dask worker: ``function(*shared, item)``, ``shared`` loaded once per run; refused
    when the worker's chunkproof is not the client's (:func:`build`)."""
    if client_build != build():
        raise ExecutorError(
            "a Dask worker runs another chunkproof than this one (its modules differ): "
            "install the same chunkproof on every worker"
        )
    loaded = _LOADED.get(digest)
    if loaded is None:
        loaded = _LOADED[digest] = safe_loads(shared)
        while len(_LOADED) > KEPT_CONTEXTS:
            del _LOADED[next(iter(_LOADED))]
    return function(*loaded, safe_loads(item))


class ExecutorError(ChunkproofError):
    """The cluster lost a task (a worker died, the connection closed), or a task failed on a
    worker with an error of its machine (a file it could not write): one line, exit 3."""

    exit_code = EXIT_UNKNOWN


class DaskExecutor:
    """Tasks on the workers of a Dask client; ``shared`` goes once to every worker. A task
    the cluster loses (not one the engines' code fails) is an :class:`ExecutorError`."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def map(
        self,
        function: Callable[..., R],
        shared: tuple[Any, ...],
        items: Sequence[Any],
    ) -> Iterator[R]:
        """``function(*shared, item)`` for every item, one Dask task each."""
        from distributed import KilledWorker

        payload = _dumps(shared)
        digest = hashlib.sha256(payload).hexdigest()
        (stored,) = self.client.scatter([payload], broadcast=True, hash=False)
        futures = [
            self.client.submit(
                _run_remote,
                function,
                build(),
                digest,
                stored,
                _dumps(item),
                pure=False,
                retries=0,
            )
            for item in items
        ]
        try:
            for future in futures:
                yield future.result()
        except (OSError, TimeoutError, CancelledError, KilledWorker) as exc:
            where = (
                "a task failed on a Dask worker"
                if getattr(future, "status", None) == "error"
                else "the Dask cluster failed"
            )
            raise ExecutorError(f"{where}, the run is incomplete: {exc}") from None
        finally:
            self.client.cancel([*futures, stored])


def _dumps(value: Any) -> bytes:
    """``value`` as the bytes :func:`safe_loads` reads on a worker."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def check_executor(text: str) -> str:
    """``--executor``: ``local``, ``dask`` or ``dask://HOST:PORT``; ``ValueError`` otherwise."""
    if text in (LOCAL, DASK):
        return text
    host, _, port = text.removeprefix(DASK_PREFIX).rpartition(":")
    if text.startswith(DASK_PREFIX) and host and "/" not in host and port.isdigit():
        return text
    raise ValueError(f"{text!r} is not local, dask or dask://HOST:PORT")


@contextmanager
def open_executor(text: str, jobs: int) -> Iterator[Executor]:
    """The executor ``--executor`` names (:func:`check_executor`): the local pool of ``jobs``
    processes, a Dask ``LocalCluster`` of ``jobs`` single-threaded worker processes (closed
    on exit), or the scheduler at ``dask://HOST:PORT``."""
    if text == LOCAL:
        yield LocalPool(jobs)
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ChunkproofError(
            f"--executor {text} needs Dask: pip install 'chunkproof[dask]'"
        ) from None
    if text == DASK:
        cluster = LocalCluster(
            n_workers=usable_jobs(jobs),
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        )
        with cluster, Client(cluster) as client:
            yield DaskExecutor(client)
        return
    address = "tcp://" + text.removeprefix(DASK_PREFIX)
    try:
        client = Client(address, timeout=CONNECT_SECONDS)
    except OSError as exc:
        raise ChunkproofError(f"--executor {text}: no Dask scheduler reachable ({exc})") from None
    with client:
        yield DaskExecutor(client)
