"""The analyser's worker processes: forked where that is safe, spawned otherwise, quiet on signals the controller handles."""

from __future__ import annotations

import signal

CONTROLLER_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def worker_pool(workers: int, method: str | None = None):  # a multiprocessing Pool
    """Forked workers start at once, with this process's imports; a spawned one starts a fresh
    interpreter and imports numpy and msgspec again (~0.2 s of a 3 s analysis of 8 ranks).
    Forking is only safe with no other thread that may hold a lock the child inherits (a
    campaign's SSH transport has reader threads): then spawn.
    The controller's SIGTERM and SIGINT are blocked while the pool forks (pending ones reach it
    once it is done, none is lost): a worker forked with the controller's handlers and ended before
    its initializer ran raised KeyboardInterrupt in the fork itself, outside multiprocessing's
    bootstrap, and went on as a second copy of the controller (seen once: a test's pytest printed its
    summary twice). Each worker unblocks them once its own handlers are set."""
    import multiprocessing
    import threading

    method = method or ("fork" if threading.active_count() == 1 else "spawn")
    context = multiprocessing.get_context(method)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CONTROLLER_SIGNALS)
    try:
        return context.Pool(workers, initializer=_quiet_worker)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _quiet_worker() -> None:
    """A worker takes the default SIGTERM and ignores Ctrl-C. A forked one would inherit the
    controller's handlers (`resume` turns SIGTERM into KeyboardInterrupt), and the pool ends its
    workers with SIGTERM when a rank fails: each would print a traceback under the one-line error.
    Ctrl-C reaches the whole process group; the controller alone handles it, ending the pool."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CONTROLLER_SIGNALS)
