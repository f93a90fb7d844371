"""Pictures of a fit (matplotlib, written as PNG files; no screen needed).

* :func:`waterfall`: the final objectives of all starts, sorted, relative to the best
  (one point per start; failed starts drawn at the top edge with another marker);
* :func:`loss_curves`: every start's loss against the step;
* :func:`fits`: for every experiment, one panel per observable measured in it: the
  measurements, the simulation at the best start, and the noise model's band (mean +- one
  sigma; on the transformed scale for log-transformed observables).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

TRANSFORMS = ("lin", "log", "log10")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def waterfall(result: Any, path: str | os.PathLike | None = None):
    """Sorted final objectives, as pyPESTO draws them: ``objective - best + 1`` on a log
    axis, so that starts at the best value sit at 1 and the rest by how far above it they
    ended; returns the figure (saved to ``path`` if given)."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    ranked = result.ranked
    values = np.array([r.value for r in ranked])
    finite = np.isfinite(values)
    best = values[finite].min() if finite.any() else 0.0
    shifted = values - best + 1.0
    fig, ax = plt.subplots(figsize=(6, 4))
    ranks = np.arange(1, len(values) + 1)
    ax.plot(ranks[finite], shifted[finite], "o-", color="C0", label="final objective")
    if (~finite).any():
        top = shifted[finite].max() if finite.any() else 1.0
        ax.plot(ranks[~finite], np.full((~finite).sum(), top), "x", color="C3",
                label="failed (objective not finite)")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("start, sorted by final objective")
    ax.set_ylabel("final objective - best + 1")
    ax.set_title(f"waterfall: {len(values)} start(s), best objective {best:.6g}")
    ax.legend()
    fig.tight_layout()
    _save(fig, path)
    return fig


def loss_curves(result: Any, path: str | os.PathLike | None = None):
    """Loss against step for every start."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in sorted(result.starts, key=lambda r: r.start):
        trace = np.asarray(r.trace, float)
        ax.plot(np.arange(1, trace.size + 1), trace, label=f"start {r.start}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (negative log-posterior)")
    ax.set_yscale("symlog")
    ax.set_title("loss curves")
    if len(result.starts) <= 10:
        ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig


def fits(plan: Any, evaluation: Any, folder: str | os.PathLike | None = None
         ) -> dict[str, Any]:
    """One figure per experiment (``fit_<experiment>.png``): measurements, simulations
    and the noise band of ``evaluation`` (a ``Simulator.evaluate`` result)."""
    plt = _pyplot()
    m = plan.measurements
    sims = np.asarray(evaluation.simulations, float)
    sigma = np.asarray(evaluation.sigma, float) if evaluation.sigma is not None else None
    figures = {}
    experiments = [e.id for e in plan.experiments]
    for e, exp_id in enumerate(experiments):
        in_exp = m.experiment == e
        observables = sorted(set(m.observable[in_exp].tolist()))
        if not observables:
            continue
        fig, axes = plt.subplots(1, len(observables), figsize=(4.5 * len(observables), 3.6),
                                 squeeze=False)
        for ax, o in zip(axes[0], observables):
            idx = np.flatnonzero(in_exp & (m.observable == o))
            idx = idx[np.argsort(m.time[idx], kind="stable")]
            t, data, sim = m.time[idx], m.value[idx], sims[idx]
            ax.plot(t, data, "o", color="C0", label="measurement")
            ax.plot(t, sim, "-", color="C1", label="simulation")
            if sigma is not None:
                lo, hi = _band(sim, sigma[idx], m.transform[idx])
                ax.fill_between(t, lo, hi, color="C1", alpha=0.25, label="noise model (1 sd)")
            ax.set_title(f"{plan.observable_ids[o]} ({exp_id or 'no experiment'})")
            ax.set_xlabel("time")
            ax.set_ylabel(plan.observable_ids[o])
            ax.legend(fontsize="small")
        fig.tight_layout()
        name = f"fit_{exp_id or 'default'}"
        if folder is not None:
            _save(fig, Path(folder) / f"{name}.png")
        figures[name] = fig
    return figures


def _band(sim: np.ndarray, sigma: np.ndarray, transform: np.ndarray):
    """Mean +- sigma on each measurement's transformed scale, back on the linear scale."""
    lo, hi = sim - sigma, sim + sigma
    with np.errstate(divide="ignore", invalid="ignore"):
        log = transform == 1
        lo = np.where(log, sim * np.exp(-sigma), lo)
        hi = np.where(log, sim * np.exp(sigma), hi)
        log10 = transform == 2
        lo = np.where(log10, sim * 10.0 ** (-sigma), lo)
        hi = np.where(log10, sim * 10.0 ** sigma, hi)
    return lo, hi


def _save(fig: Any, path: str | os.PathLike | None) -> None:
    if path is None:
        return
    from petab_sciml.safe_write import staged_output

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_output(path, overwrite=True) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
