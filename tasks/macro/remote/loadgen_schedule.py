"""When the load client's open-loop requests are due: gamma arrivals at a rate, and how long a
kept-alive connection may wait before it is not reused (shipped beside loadgen.py)."""

import random

KEEP_ALIVE_S = 2.0
"""Reuse a connection idle at most this long: well inside servers' keep-alive timeouts."""


def arrival_times(requests, rate, burstiness, seed):
    """Offsets (s) at which requests are due: gamma gaps of shape ``burstiness`` (1: Poisson;
    below 1: burstier), scaled so they add up to (requests - 1) / rate, so the run asks for
    exactly ``rate`` whatever the draw."""
    rng = random.Random(seed + 7919)
    gaps = [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(max(0, requests - 1))]
    scale = (len(gaps) / rate) / sum(gaps) if gaps and sum(gaps) > 0 else 1.0
    times, now = [0.0], 0.0
    for gap in gaps:
        now += gap * scale
        times.append(now)
    return times[:requests]
