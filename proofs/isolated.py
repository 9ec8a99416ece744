"""A solver call in a child process that is killed at its deadline.

Z3's Spacer does not always honour its own timeout (on the scheduler-step model it ran past
ten minutes on a 20 s limit, and a call in progress cannot be interrupted from Python), so a
caller that must answer in bounded time runs it here: the child is a fork of this process (it
shares the parent's solver objects, nothing is pickled on the way in), and sends back the
function's result; at the deadline the parent kills it. A killed, crashed or silent child is
``None``: the caller reads it as "unknown", never as an answer.

A forked child (this one, a worker of :mod:`chunkproof.checker.engines.executor`'s pool) leaves the
stopping signals to its parent and dies with it (:func:`quiet_child`), and is forked with them
held (:func:`held_signals`), so that none reaches it before it is quiet.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import TypeVar

Result = TypeVar("Result")

GRACE_SECONDS = 5.0
"""How long after the deadline a child that has not answered is left before it is killed."""
PR_SET_PDEATHSIG = 1
"""Linux prctl option: the signal a process gets when its parent dies."""
STOPPING_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
"""The signals that stop a run: the parent handles them, a forked child never does."""


@contextmanager
def held_signals() -> Iterator[None]:
    """:data:`STOPPING_SIGNALS` held back in this thread while the block runs (one that comes
    is handled when it ends): a child forked meanwhile starts with them blocked, and unblocks
    them only once it is quiet (:func:`quiet_child`), so the parent's handlers, inherited by
    the fork, never run in it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def quiet_child(parent: int) -> None:
    """A forked child ignores Ctrl-C (its parent stops it: no child prints a traceback), dies
    at once on SIGTERM (the parent's handler, inherited by the fork, is not its own), and is
    killed when the parent dies, even by SIGKILL (Linux), so no child outlives a run; then it
    takes the signals :func:`held_signals` held."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING_SIGNALS)
    if os.getppid() != parent:  # the parent died before the death signal was set
        os._exit(1)


def call(function: Callable[[], Result], seconds: float) -> Result | None:
    """``function()`` in a forked child; its result, or ``None`` if the child did not return
    one within ``seconds`` (then :data:`GRACE_SECONDS` more) or raised."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(function, send, os.getpid()), daemon=True)
    with held_signals():
        child.start()
    send.close()
    try:
        if not receive.poll(seconds + GRACE_SECONDS):
            return None
        kind, value = receive.recv()
    except EOFError:  # the child died without answering
        return None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    return value if kind == "ok" else None


def _run(function: Callable[[], object], send: Connection, parent: int) -> None:
    quiet_child(parent)
    try:
        send.send(("ok", function()))
    except BaseException as exc:  # any failure is "no answer" to the parent
        send.send(("error", repr(exc)))
    finally:
        send.close()
