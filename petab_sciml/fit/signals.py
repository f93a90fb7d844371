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

import signal
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


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`FitSignalled` (once: later
    ones are ignored, so that the checkpoints being written are finished).  Outside the
    main thread (where Python cannot handle signals) it does nothing."""
    def handler(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise FitSignalled(signum)

    with _handlers_replaced(STOP_SIGNALS, handler):
        yield


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
