"""Where stages end and windows lie: partitions of a problem's measurement times.

Both partitions follow the draft PEtab SciML training-strategies text: curriculum stage
ends and window bounds are measurement time points, found automatically from a number
of stages or windows, or given as explicit interior points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from petab_sciml.errors import PetabSciMLError

Window = tuple[float, float]
"""``(t0, tf)``: a window's first and last time (both inclusive)."""


class PartitionError(PetabSciMLError):
    """Stage ends or windows that do not fit the problem's measurement times."""


def unique_times(times: Sequence[float]) -> list[float]:
    """The distinct finite measurement times, ascending."""
    return sorted({float(t) for t in times if math.isfinite(float(t))})


def stage_ends(times: Sequence[float], *, stages: int | None = None,
               split: Sequence[float] | None = None) -> list[float]:
    """Curriculum stage end times, the last the largest finite measurement time.

    ``stages``: the unique times cut into that many consecutive groups of nearly equal
    size, each stage ending at its group's last time; ``split``: the ends of every stage
    but the last, ascending, strictly inside the time range.  Each stage then holds at
    least one measurement time more than the one before."""
    u = unique_times(times)
    if not u:
        raise PartitionError("the problem has no finite measurement time to split")
    if (stages is None) == (split is None):
        raise PartitionError("give either a number of stages or split times")
    if split is not None:
        inner = _checked_split(u, split)
        ends = [*inner, u[-1]]
        for lo, hi in zip([-math.inf, *ends], ends, strict=False):
            if not any(lo < t <= hi for t in u):
                raise PartitionError(f"the stage ending at {hi:g} adds no measurement time")
        return ends
    if not 1 <= stages <= len(u):
        raise PartitionError(f"{stages} stages need at least as many distinct measurement "
                             f"times; the problem has {len(u)}")
    m = len(u)
    return [u[math.ceil((i + 1) * m / stages) - 1] for i in range(stages)]


def shooting_windows(times: Sequence[float], *, windows: int | None = None,
                     split: Sequence[float] | None = None) -> list[Window]:
    """Multiple-shooting windows ``[(t0, tf), ...]`` that cover the finite measurement
    times, each window starting where the one before ends.

    ``windows``: the gaps between consecutive unique times shared out as evenly as
    possible, so every window starts and ends at a measurement time; ``split``: the
    interior window bounds, ascending, strictly inside the time range.  Every window
    must hold a measurement time besides its start (t0 < tf)."""
    u = unique_times(times)
    if len(u) < 2:
        raise PartitionError("multiple shooting needs at least two distinct finite "
                             "measurement times")
    if (windows is None) == (split is None):
        raise PartitionError("give either a number of windows or split times")
    if split is not None:
        bounds = [u[0], *_checked_split(u, split), u[-1]]
        out = list(zip(bounds[:-1], bounds[1:], strict=True))
        for t0, tf in out:
            if not any(t0 <= t <= tf for t in u):
                raise PartitionError(f"the window [{t0:g}, {tf:g}] holds no measurement")
        return out
    gaps = len(u) - 1
    if not 1 <= windows <= gaps:
        raise PartitionError(f"{windows} windows need at least {windows + 1} distinct "
                             f"measurement times; the problem has {len(u)}")
    idx = [round(i * gaps / windows) for i in range(windows + 1)]
    return [(u[a], u[b]) for a, b in zip(idx[:-1], idx[1:], strict=True)]


def merged_windows(windows: Sequence[Window], stage: int) -> list[Window]:
    """Curriculum multiple shooting: the windows of ``stage`` (1-based) from those of
    stage 1: window i is ``[t0_i, tf_(i + stage - 1)]``, one window fewer per stage."""
    n = len(windows)
    if not 1 <= stage <= n:
        raise PartitionError(f"stage {stage} of {n}")
    return [(windows[i][0], windows[i + stage - 1][1]) for i in range(n - stage + 1)]


def _checked_split(u: list[float], split: Sequence[float]) -> list[float]:
    points = [float(t) for t in split]
    if any(not math.isfinite(t) for t in points):
        raise PartitionError("split times must be finite numbers")
    if any(b <= a for a, b in zip(points, points[1:], strict=False)):
        raise PartitionError(f"split times must be strictly ascending, got {points}")
    if points and not (u[0] < points[0] and points[-1] < u[-1]):
        raise PartitionError(f"split times must lie strictly inside the measurement time "
                             f"range [{u[0]:g}, {u[-1]:g}], got {points}")
    return points
