"""A solver call in a child process that is killed at its deadline.

Z3's Spacer does not always honour its own timeout (on the scheduler-step model it ran past
ten minutes on a 20 s limit, and a call in progress cannot be interrupted from Python), so a
caller that must answer in bounded time runs it here: the child is a fork of this process (it
shares the parent's solver objects, nothing is pickled on the way in), and sends back the
function's result; at the deadline the parent kills it. A killed, crashed or silent child is
``None``: the caller reads it as "unknown", never as an answer.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TypeVar

Result = TypeVar("Result")

GRACE_SECONDS = 5.0
"""How long after the deadline a child that has not answered is left before it is killed."""


def call(function: Callable[[], Result], seconds: float) -> Result | None:
    """``function()`` in a forked child; its result, or ``None`` if the child did not return
    one within ``seconds`` (then :data:`GRACE_SECONDS` more) or raised."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(function, send), daemon=True)
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


def _run(function: Callable[[], object], send: Connection) -> None:
    try:
        send.send(("ok", function()))
    except BaseException as exc:  # any failure is "no answer" to the parent
        send.send(("error", repr(exc)))
    finally:
        send.close()
