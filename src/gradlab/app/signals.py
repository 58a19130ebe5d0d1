"""Ctrl-C, SIGTERM and a pre-emption signal during a run: the step in progress finishes, then
the run stops cleanly.

During Lightning's fit, Ctrl-C asks the module to stop at the next step boundary (a second
Ctrl-C interrupts at once) and SIGTERM is left to Lightning (it stops at a batch boundary, as
on a SLURM pre-emption); outside fit, SIGTERM raises Terminated. After the first SIGTERM any
other is ignored (SLURM may signal every process of the job, and again).

In a submitit job (`requeue` set: its pre-emption signal, gradlab.app.slurmjob), that signal
also stops the run at the next step boundary (one received before fit, at the first step), and
after fit both it and SIGTERM are ignored: the run has ended and its result is on its way."""

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

    def __init__(self, requeue: int | None = None):
        self.in_fit = self.fit_done = self.term_received = False
        self.module = None
        self.previous_term = self.previous_int = self.previous_requeue = None
        self.requeue = requeue  # the pre-emption signal to stop on, or None
        self.requeue_received: str | None = None  # its name, once received

    def _on_term(self, signum, frame):
        first = not self.term_received
        self.term_received = True
        ended = self.fit_done and self.requeue is not None
        if first and not self.in_fit and not ended:  # in fit: Lightning stops the run
            raise Terminated

    def _on_int(self, signum, frame):
        _set(signal.SIGINT, self.previous_int or signal.default_int_handler)  # a second one: now
        self.module.request_stop()

    def _on_requeue(self, signum, frame):
        self.requeue_received = signal.Signals(signum).name
        if self.in_fit:
            self.module.request_stop(self.requeue_received)

    def __enter__(self):
        self.previous_term = _set(signal.SIGTERM, self._on_term)
        if self.requeue is not None:
            self.previous_requeue = _set(self.requeue, self._on_requeue)
        return self

    def __exit__(self, *exc):
        _set(signal.SIGTERM, self.previous_term)
        if self.requeue is not None:
            _set(self.requeue, self.previous_requeue)
        return False

    @contextlib.contextmanager
    def fitting(self, module):
        """While fitting `module`: Ctrl-C requests a stop at the next step boundary."""
        self.in_fit, self.module = True, module
        self.previous_int = _set(signal.SIGINT, self._on_int)
        if self.requeue_received:  # received before fit: stop at the first step
            module.request_stop(self.requeue_received)
        try:
            yield
        finally:
            _set(signal.SIGINT, self.previous_int or signal.default_int_handler)
            self.in_fit, self.fit_done = False, True
