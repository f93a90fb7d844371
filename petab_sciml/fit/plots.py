"""Pictures of a fit (matplotlib, written as PNG files; no screen needed).

* :func:`waterfall`: the final objectives of all starts, sorted, relative to the best
  (one point per start; failed starts drawn at the top edge with another marker);
* :func:`loss_curves`: every start's loss against the step, as offsets to the lowest
  loss on a log axis, the best start highlighted;
* :func:`fits`: for every experiment, one column per observable measured in it: the
  measurements, the simulation at the best start, and the noise model's band (mean +- one
  sigma; on the transformed scale for log-transformed observables), with the residuals
  below;
* :func:`learned_terms`: what each network inside the model learned, over the range of
  inputs its trajectories reach.
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
    """Loss against step for every start, as offsets to the lowest loss of the fit
    (``loss - lowest + 1``, log axis: the lowest sits at 1, every decade above it is a
    tenfold larger gap); the best start (lowest final objective) is drawn last, thick and
    labelled, the others thin.  Non-finite losses are left out."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    traces = {r.start: np.asarray(r.trace, float) for r in result.starts}
    finite = [t[np.isfinite(t)] for t in traces.values()]
    lowest = min((t.min() for t in finite if t.size), default=0.0)
    best = result.best.start
    for start in sorted(traces, key=lambda k: (k == best, k)):
        trace = traces[start]
        steps = np.arange(1, trace.size + 1)
        keep = np.isfinite(trace)
        is_best = start == best
        ax.plot(steps[keep], trace[keep] - lowest + 1.0,
                label=f"start {start}" + (" (best)" if is_best else ""),
                linewidth=2.2 if is_best else 0.9, alpha=1.0 if is_best else 0.6,
                color="C3" if is_best else None, zorder=3 if is_best else 2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss - lowest + 1")
    ax.set_title(f"loss curves (negative log-posterior; lowest {lowest:.6g})")
    if len(traces) <= 10:
        ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig


def fits(plan: Any, evaluation: Any, folder: str | os.PathLike | None = None,
         dense: tuple[Any, Any] | None = None,
         units: tuple[str | None, dict[str, str]] | None = None) -> dict[str, Any]:
    """One figure per experiment (``fit_<experiment>.png``), one column per observable
    measured in it: on top the measurements, the simulation and the noise band of
    ``evaluation`` (a ``Simulator.evaluate`` result); below, the residuals (measurement -
    simulation on the observable's transformed scale, divided by the noise standard
    deviation when there is one) with the +-1 band.  ``dense``: ``(plan, evaluation)``
    of the same parameters on a dense time grid
    (:func:`petab_sciml.simulation.dense.dense_plan`), drawn as the simulation curve;
    without it the simulation is drawn at the measurement times.  ``units``: ``(time
    unit, {observable id: unit})`` for the axis labels, where the model declares them
    (:mod:`petab_sciml.sbml_units`)."""
    plt = _pyplot()
    time_unit, obs_units = units or (None, {})
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
        fig, axes = plt.subplots(2, len(observables), figsize=(4.5 * len(observables), 5.4),
                                 squeeze=False, sharex="col",
                                 gridspec_kw={"height_ratios": [3, 1.4]})
        for ax, res_ax, o in zip(axes[0], axes[1], observables):
            idx = np.flatnonzero(in_exp & (m.observable == o))
            idx = idx[np.argsort(m.time[idx], kind="stable")]
            t, data, sim = m.time[idx], m.value[idx], sims[idx]
            ax.plot(t, data, "o", color="C0", label="measurement")
            curve = _dense_curve(dense, exp_id, plan.observable_ids[o])
            if curve is None:
                ax.plot(t, sim, "-", color="C1", label="simulation")
            else:
                ax.plot(*curve, "-", color="C1", label="simulation")
                ax.plot(t, sim, ".", color="C1", markersize=5)
            if sigma is not None:
                lo, hi = _band(sim, sigma[idx], m.transform[idx])
                ax.fill_between(t, lo, hi, color="C1", alpha=0.25, label="noise model (1 sd)")
            oid = plan.observable_ids[o]
            ax.set_title(f"{oid} ({exp_id or 'no experiment'})")
            ax.set_ylabel(_label(oid, obs_units.get(oid)))
            ax.legend(fontsize="small")
            res = residuals(data, sim, None if sigma is None else sigma[idx],
                            m.transform[idx])
            res_ax.axhline(0.0, color="0.5", linewidth=0.8)
            if sigma is not None:
                res_ax.axhspan(-1.0, 1.0, color="C1", alpha=0.15)
            res_ax.plot(t, res, "o", color="C0", markersize=4)
            res_ax.set_xlabel(_label("time", time_unit))
            res_ax.set_ylabel("residual / sd" if sigma is not None else "residual")
        _keep(figures, fig, f"fit_{exp_id or 'default'}", folder)
    return figures


def learned_terms(terms: list[dict[str, Any]], folder: str | os.PathLike | None = None,
                  truth: dict[str, Any] | None = None) -> dict[str, Any]:
    """One figure per network (``term_<network>.png``) from
    :func:`petab_sciml.fit.learned_terms`, one panel per output: against one input a
    line, with the input values the trajectories reach marked below it; against two a
    heat map, with the trajectories drawn over it; against three or more one line per
    output and input (a row per output), the other inputs at their median.  ``truth``:
    ``{output id: f}``, the true term where it is known (PEtab declares none),
    ``f(points)`` with ``points`` of shape ``(n, inputs)``: drawn dashed against one
    input and in the sweeps, as a second heat map of learned - true against two."""
    plt = _pyplot()
    truth = truth or {}
    figures = {}
    for term in terms:
        if len(term["axes"]) > 2:
            _keep(figures, _sweeps_figure(plt, term, truth), f"term_{term['id']}", folder)
            continue
        outputs, axes, seen = term["outputs"], term["axes"], term["seen"]
        panels_needed = len(outputs) + (len(axes) == 2) * sum(o in truth for o in outputs)
        fig, panels = plt.subplots(1, panels_needed, figsize=(4.8 * panels_needed, 3.9),
                                   squeeze=False)
        panel = iter(panels[0])
        for oid, values in outputs.items():
            ax = next(panel)
            true = (np.asarray(truth[oid](term["points"]), float).reshape(values.shape)
                    if oid in truth else None)
            if len(axes) == 1:
                ax.plot(axes[0], values, "-", color="C1", label=oid)
                if true is not None:
                    ax.plot(axes[0], true, "--", color="0.3", label="true")
                ax.plot(seen[:, 0], np.full(seen.shape[0], values.min()), "|", color="C0",
                        alpha=0.4, label="inputs reached")
                ax.set_xlabel(term["inputs"][0])
                ax.set_ylabel(oid)
                ax.legend(fontsize="small")
            else:
                mesh = ax.pcolormesh(axes[0], axes[1], values, shading="auto",
                                     cmap="viridis")
                fig.colorbar(mesh, ax=ax, label=oid)
                ax.plot(seen[:, 0], seen[:, 1], "-", color="white", linewidth=1.0,
                        label="trajectories")
                ax.set_xlabel(term["inputs"][0])
                ax.set_ylabel(term["inputs"][1])
                ax.legend(fontsize="small", loc="upper right")
                if true is not None:
                    diff_ax = next(panel)
                    diff = values - true
                    span = float(np.max(np.abs(diff))) or 1.0
                    mesh = diff_ax.pcolormesh(axes[0], axes[1], diff, shading="auto",
                                              cmap="RdBu_r", vmin=-span, vmax=span)
                    fig.colorbar(mesh, ax=diff_ax, label=f"{oid} - true")
                    diff_ax.plot(seen[:, 0], seen[:, 1], "-", color="0.2", linewidth=1.0)
                    diff_ax.set_xlabel(term["inputs"][0])
                    diff_ax.set_ylabel(term["inputs"][1])
                    diff_ax.set_title(f"{term['id']}: learned - true")
            ax.set_title(f"{term['id']}: {oid}")
        _keep(figures, fig, f"term_{term['id']}", folder)
    return figures


def _sweeps_figure(plt: Any, term: dict[str, Any], truth: dict[str, Any]) -> Any:
    """The learned term against three or more inputs: a row of sweeps per output."""
    outputs, axes, seen = term["outputs"], term["axes"], term["seen"]
    fig, panels = plt.subplots(len(outputs), len(axes), squeeze=False,
                               figsize=(3.6 * len(axes), 3.2 * len(outputs)))
    for row, (oid, values) in zip(panels, outputs.items()):
        true = (np.asarray(truth[oid](term["points"]), float).reshape(values.shape)
                if oid in truth else None)
        for i, ax in enumerate(row):
            ax.plot(axes[i], values[i], "-", color="C1", label=oid)
            if true is not None:
                ax.plot(axes[i], true[i], "--", color="0.3", label="true")
            ax.plot(seen[:, i], np.full(seen.shape[0], values[i].min()), "|", color="C0",
                    alpha=0.4, label="inputs reached")
            ax.set_xlabel(term["inputs"][i])
            ax.set_ylabel(oid)
            ax.set_title(f"{term['id']}: {oid}, others at median", fontsize="small")
        row[0].legend(fontsize="small")
    return fig


def _keep(figures: dict[str, Any], fig: Any, name: str,
          folder: str | os.PathLike | None) -> None:
    """Lay out ``fig``, save it as ``folder/<name>.png`` if a folder is given, and keep
    it in ``figures`` under ``name``."""
    fig.tight_layout()
    if folder is not None:
        _save(fig, Path(folder) / f"{name}.png")
    figures[name] = fig


def _dense_curve(dense: tuple[Any, Any] | None, exp_id: str, obs_id: str
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(times, values)`` of one observable of one experiment in a dense simulation."""
    if dense is None:
        return None
    plan, evaluation = dense
    m = plan.measurements
    experiments = [e.id for e in plan.experiments]
    if exp_id not in experiments or obs_id not in plan.observable_ids:
        return None
    idx = np.flatnonzero((m.experiment == experiments.index(exp_id))
                         & (m.observable == plan.observable_ids.index(obs_id)))
    idx = idx[np.argsort(m.time[idx], kind="stable")]
    return m.time[idx], np.asarray(evaluation.simulations, float)[idx]


def _label(name: str, unit: str | None) -> str:
    return f"{name} [{unit}]" if unit else name


def residuals(data: np.ndarray, sim: np.ndarray, sigma: np.ndarray | None,
              transform: np.ndarray) -> np.ndarray:
    """``measurement - simulation`` on each measurement's transformed scale (lin, log,
    log10: ``transform`` 0, 1, 2), divided by the noise parameter when ``sigma`` is
    given (the standardized residual of a normal noise model)."""
    data, sim = np.asarray(data, float), np.asarray(sim, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        res = np.where(transform == 1, np.log(data) - np.log(sim), data - sim)
        res = np.where(transform == 2, np.log10(data) - np.log10(sim), res)
        return res if sigma is None else res / np.asarray(sigma, float)


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
