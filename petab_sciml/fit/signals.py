"""Stop signals of a fit: SIGTERM and SIGHUP stop it as Ctrl-C does.

What a batch scheduler, ``timeout`` or a container stop sends (SIGTERM), or a closed
terminal (SIGHUP), raises :class:`FitSignalled` (a ``KeyboardInterrupt``) in the main
thread, so the Ctrl-C path runs: every start checkpoints where it is and the command
exits ``128 + signal number`` (143 for SIGTERM, 129 for SIGHUP).  A signal the process
started with ignored (``nohup``) stays ignored.  Worker processes of an embedded
``LocalCluster`` are started with both signals ignored: a signal sent to the whole process
group (as ``timeout`` does) reaches the fit's process, which stops the workers (they
checkpoint) and closes the cluster.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


class FitSignalled(KeyboardInterrupt):
    """The fit was stopped by signal ``signum``; ``exit_status`` is ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = int(signum)
        self.name = signal.Signals(signum).name
        self.exit_status = 128 + self.signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _handlers_replaced(signums, handler, *, keep_ignored: bool = True) -> Iterator[None]:
    """Within the block, ``handler`` handles each of ``signums`` (those ignored, or with
    a handler not set from Python, keep theirs where ``keep_ignored``); outside the main
    thread (where Python cannot handle signals) nothing changes."""
    if not _in_main_thread():
        yield
        return
    saved = {}
    for s in signums:
        previous = signal.getsignal(s)
        if keep_ignored and (previous is signal.SIG_IGN or previous is None):
            continue
        saved[s] = previous
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)


REDELIVER_AFTER_S = 0.05
"""Delay (seconds) before a dropped interrupt is raised again."""
_ACTIVE: list[int] | None = None
"""The signals received within the innermost :func:`stop_signals_interrupt` block (the
first only), or None outside every block."""


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`FitSignalled` (once: later
    ones are ignored, so that the checkpoints being written are finished).  Outside the
    main thread (where Python cannot handle signals) it does nothing.

    Python runs a signal handler wherever the main thread is, weakref callbacks and
    finalisers included, and an exception raised there is printed ("Exception ignored
    in ...") and dropped.  A fit whose stop signal met that fate would train on with the
    signal ignored (torch's compiler runs such callbacks often).  So a dropped
    :class:`FitSignalled`, or a dropped Ctrl-C ``KeyboardInterrupt``, is raised again
    (``sys.unraisablehook``), and the training loops raise a stop signal's at their next
    step (:func:`raise_if_stop_received`) should library code have swallowed it."""
    received: list[int] = []
    redeliver: list[bool] = []

    def handler(signum, frame):
        if not received:
            received.append(signum)
        elif not redeliver:
            return
        redeliver.clear()
        raise FitSignalled(received[0])

    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        dropped = info.exc_value
        if isinstance(dropped, FitSignalled) and received:
            redeliver.append(True)
            signum = received[0]
        elif isinstance(dropped, KeyboardInterrupt) and not isinstance(dropped, FitSignalled):
            signum = signal.SIGINT       # Ctrl-C, dropped the same way
        else:
            previous_hook(info)
            return
        # the handler (ours, Python's Ctrl-C handler, or signals_deferred's) runs again
        # in the main thread, from another thread and a moment later: run from here it
        # would raise inside this hook, or inside the callback still running, and be
        # dropped again (if it is all the same, this hook is called again)
        timer = threading.Timer(REDELIVER_AFTER_S, _thread.interrupt_main, args=(signum,))
        timer.daemon = True
        timer.start()

    if not _in_main_thread():
        yield
        return
    global _ACTIVE
    outer, _ACTIVE = _ACTIVE, received
    sys.unraisablehook = unraisable
    try:
        with _handlers_replaced(STOP_SIGNALS, handler):
            yield
    finally:
        sys.unraisablehook = previous_hook
        _ACTIVE = outer


def raise_if_stop_received() -> None:
    """Raise :class:`FitSignalled` if a stop signal arrived within the current
    :func:`stop_signals_interrupt` block and its exception did not end the fit (library
    code that swallows every exception).  Called by the training loops at every step;
    does nothing outside such a block or outside the main thread."""
    if _ACTIVE and _in_main_thread():
        raise FitSignalled(_ACTIVE[0])


@contextmanager
def children_ignore_stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP are ignored, and so they are in processes
    started then (an ignored signal stays ignored across ``exec``).  A signal sent to this
    process within the block is lost: keep the block to the start of the processes."""
    with _handlers_replaced(STOP_SIGNALS, signal.SIG_IGN, keep_ignored=False):
        yield


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Within the block, Ctrl-C (SIGINT), SIGTERM and SIGHUP are held back and raised
    again, to the handlers in place before, when it ends: a checkpoint being written is
    finished before the interrupt (an interrupt inside ``np.savez`` left its zip file
    half closed and raised a ``ValueError`` in place of the ``KeyboardInterrupt``).
    Held at the handler, not by a signal mask: a process-directed signal goes to any
    thread that does not block it.  Outside the main thread it does nothing."""
    received: list[int] = []

    def hold(signum, frame):
        received.append(signum)

    try:
        with _handlers_replaced((signal.SIGINT, *STOP_SIGNALS), hold):
            yield
    finally:
        if received:
            signal.raise_signal(received[0])
