"""Marks shared by the test modules."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def slow_unless(values: Iterable, fast: Iterable) -> list:
    """``values`` for ``pytest.mark.parametrize``, each one not in ``fast`` marked
    ``slow``: the fast ones stay in ``make test-fast``, every one runs in ``make test``.

    A tuple value (several argument names) becomes the same ``pytest.param`` arguments,
    so test ids are unchanged.
    """
    fast = list(fast)
    out = []
    for value in values:
        if value in fast:
            out.append(value)
            continue
        args = value if isinstance(value, tuple) else (value,)
        out.append(pytest.param(*args, marks=pytest.mark.slow))
    return out
