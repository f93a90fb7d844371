"""A stop signal ends the fit even where Python drops the exception its handler raises.

Python runs signal handlers wherever the main thread happens to be, inside weakref
callbacks and finalisers too, and an exception raised there is printed and dropped.
Found as a torch fit that trained on after SIGTERM (the handler ran in a callback of
torch's compiler, then ignored the signals that followed); here the same situation is
made on purpose, with the signal sent to this process from inside a weakref callback.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref

import pytest

from petab_sciml.fit.signals import FitSignalled, stop_signals_interrupt
from petab_sciml.fit.task import Hooks

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


class _Object:
    pass


def _signal_inside_a_weakref_callback(signum: int, callback_finished: list) -> None:
    """Send ``signum`` to this process from a weakref callback that then runs on (the
    handler runs there), and wait up to 5 s for the interrupt to arrive outside it."""
    obj = _Object()

    def callback(ref):
        os.kill(os.getpid(), signum)
        total = 0
        for i in range(100_000):
            total += i
        callback_finished.append(True)

    ref = weakref.ref(obj, callback)  # noqa: F841 - the callback needs the ref alive
    del obj
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_handled_inside_a_weakref_callback_still_stops(signum):
    dropped = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = dropped.append  # what the fit's hook passes on, if anything
    callback_finished: list = []
    try:
        t0 = time.monotonic()
        with pytest.raises(FitSignalled) as caught, stop_signals_interrupt():
            _signal_inside_a_weakref_callback(signum, callback_finished)
        waited = time.monotonic() - t0
    finally:
        sys.unraisablehook = previous_hook
    # the handler did run inside the callback (its loop never finished) ...
    assert callback_finished == []
    # ... and the interrupt came again outside it, at once rather than after the wait
    assert caught.value.signum == signum and caught.value.exit_status == 128 + signum
    assert waited < 2.0
    assert dropped == []        # nothing of it reached the previous unraisable hook
    assert sys.unraisablehook is previous_hook


def test_a_ctrl_c_handled_inside_a_weakref_callback_still_interrupts():
    # Python's own Ctrl-C handler, as in the CLI (pytest-xdist's workers ignore SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    callback_finished: list = []
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt) as caught, stop_signals_interrupt():
            _signal_inside_a_weakref_callback(signal.SIGINT, callback_finished)
        waited = time.monotonic() - t0
    finally:
        signal.signal(signal.SIGINT, previous)
    assert callback_finished == []
    assert not isinstance(caught.value, FitSignalled)
    assert waited < 2.0


def test_other_dropped_exceptions_still_reach_the_previous_hook():
    dropped = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = dropped.append
    try:
        with stop_signals_interrupt():
            obj = _Object()
            ref = weakref.ref(obj, lambda r: 1 / 0)  # noqa: F841
            del obj
    finally:
        sys.unraisablehook = previous_hook
    assert len(dropped) == 1 and isinstance(dropped[0].exc_value, ZeroDivisionError)


def test_a_swallowed_stop_signal_is_raised_at_the_next_step():
    """Library code that catches every exception hides the signal's; the training loop
    asks ``Hooks.should_stop`` at every step, and that raises it again."""
    hooks = Hooks()
    with pytest.raises(FitSignalled) as caught, stop_signals_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)
        except BaseException:  # noqa: BLE001 - the library that swallows everything
            pass
        hooks.should_stop()
    assert caught.value.signum == signal.SIGTERM
    # outside the block the steps go on as before
    assert Hooks().should_stop() is False


def test_later_stop_signals_are_ignored_until_the_block_ends():
    """Once a stop is under way further signals do not interrupt it (the checkpoints
    being written are finished)."""
    finished = []
    with pytest.raises(FitSignalled), stop_signals_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)
        except FitSignalled:
            os.kill(os.getpid(), signal.SIGTERM)      # a second one, while stopping
            time.sleep(0.1)
            finished.append(True)
            raise
    assert finished == [True]
