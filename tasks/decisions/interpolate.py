"""Reading a measured curve between its points: the micros time a few batch sizes and contexts,
and a level or a step between them is read off the line joining its neighbours."""

from __future__ import annotations


def linear_between(points: list[tuple[float, float]], x: float) -> float:
    """Linear between the points, the nearest point's value beyond them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]
