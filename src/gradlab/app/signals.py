"""Ctrl-C and SIGTERM during a run: the step in progress finishes, then the run stops cleanly.

During Lightning's fit, Ctrl-C asks the module to stop at the next step boundary (a second
Ctrl-C interrupts at once) and SIGTERM is left to Lightning (it stops at a batch boundary, as
on a SLURM pre-emption); before and after fit, SIGTERM raises Terminated."""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(Exception):
    """SIGTERM outside Lightning's fit."""


def _set(signum, handler):
    """signal.signal where allowed (the main thread); returns the previous handler or None."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, handler)


class RunSignals:
    """The signal handlers of one run, as a context; `fitting(module)` for the fit itself."""

    def __init__(self):
        self.in_fit = False
        self.module = None
        self.previous_term = self.previous_int = None

    def _on_term(self, signum, frame):
        if not self.in_fit:  # during fit Lightning composes this handler with its own: let it stop
            raise Terminated

    def _on_int(self, signum, frame):
        _set(signal.SIGINT, self.previous_int or signal.default_int_handler)  # a second one: now
        self.module.request_stop()

    def __enter__(self):
        self.previous_term = _set(signal.SIGTERM, self._on_term)
        return self

    def __exit__(self, *exc):
        _set(signal.SIGTERM, self.previous_term)
        return False

    @contextlib.contextmanager
    def fitting(self, module):
        """While fitting `module`: Ctrl-C requests a stop at the next step boundary."""
        self.in_fit, self.module = True, module
        self.previous_int = _set(signal.SIGINT, self._on_int)
        try:
            yield
        finally:
            _set(signal.SIGINT, self.previous_int or signal.default_int_handler)
            self.in_fit = False
