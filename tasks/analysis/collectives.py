"""Which communication names are calls of a collective, for counting them a step.

An all-gather is not an all-reduce; the wait of an async functional collective
(`_c10d_functional::wait_tensor`) is the second half of a call whose launch is counted already.
Time is another matter: both the launch and the wait are the collective's time.
"""

from __future__ import annotations

WAIT_MARKERS = ("wait_tensor",)


def is_wait(name: str) -> bool:
    return any(marker in name for marker in WAIT_MARKERS)


def counts_as_allreduce(name: str) -> bool:
    """A communication name that is one all-reduce call (not a gather, not a wait)."""
    return "gather" not in name.lower() and not is_wait(name)


def is_allreduce_time(name: str) -> bool:
    """A communication name whose time is all-reduce time (launch or wait; not a gather)."""
    return "gather" not in name.lower()
