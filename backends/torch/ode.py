"""Adaptive explicit Runge-Kutta solves in PyTorch as one loop that ``torch.compile`` can
turn into native code.

Why not only torchdiffeq: its solver loop is Python, a few dozen small tensor operations
per stage, so a small hybrid model pays Python overhead thousands of times per solve
(0.1-0.6 s per objective on the suite's cases).  Here the whole solve, step-size control
and outputs included, is a single ``torch._higher_order_ops.while_loop`` whose body is
pure tensor code: eager, it runs as a Python loop; compiled (``torch.compile`` with
inductor, ``fullgraph=True``), the loop and the right-hand side (networks included)
become one native function and a solve costs milliseconds.  The Butcher tableaus are
torchdiffeq's (``dopri5``, ``dopri8``); the controller is torchdiffeq's (an RMS error
ratio over every component against ``atol + rtol * max(|y0|, |y1|)``, step factor
``0.9 * ratio^(-1/order)`` clipped to ``[0.2, 10]``, never shrinking after an accepted
step), with Hairer's initial step.

Compiled, the stages of a step are a loop too (:func:`rk_step_looped`: the right-hand
side, with its networks and Jacobian, traced once) or unrolled (:func:`rk_step`: traced
once per stage, no per-stage loop bookkeeping, more compilation); the executor unrolls
when the right-hand side is symbolic formulas only (``TorchOptions.unroll_stages``).
With :data:`INDUCTOR_OPTIONS` and scalar kernels for small systems, suite cases
001/002/004 compile in 20-30 s and cost 2-5x JAX per objective + gradient
(``benchmarks/bench_torch_stages.py``).

Outputs are taken where steps end: a step is shortened to land exactly on the next output
time, so nothing is interpolated; batched solves may instead interpolate with the
method's dense output (``make_batched_solve(dense_output=True)``, ``dopri8``), as the
JAX backend's diffrax solves do.  A solve fails (``ok`` false, outputs NaN) on more than
``max_steps`` steps, a collapsed step size or a non-finite state; it never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from petab_sciml.simulation.steps import max_step_growth

# torchdiffeq's step-size constants; the largest growth per step is per method
# (max_step_growth: 6x for dopri8, else torchdiffeq's 10x)
SAFETY, DFACTOR = 0.9, 0.2


@dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta method with an embedded error estimate.

    Stage ``i`` (``i >= 1``) is evaluated at ``t + c[i - 1] * h`` and
    ``y + h * sum_j a[i - 1][j] k_j``; ``b`` are the solution weights, ``e`` the error
    weights (both over every stage).  The last stage lands on the new solution (first
    same as last), so an accepted step's last stage is the next step's first.
    """

    name: str
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    e: tuple[float, ...]
    order: int
    dense: tuple[tuple[float, ...], ...] | None = None
    """Dense output (``None``: none): per stage, the coefficients (highest power first)
    of a polynomial ``P_i``; ``y(t + theta h) = y + h theta sum_i P_i(theta) k_i``."""


DENSE_OUTPUT = {
    # Bogacki & Shampine's interpolant for Prince & Dormand's 8(7) pair (the same
    # tableau as torchdiffeq's and diffrax's dopri8), as diffrax's Dopri8 uses it (the
    # JAX backend's outputs): P_i for the 14 stages (the 14th the end point's
    # derivative, first same as last), each a degree-5 polynomial in theta.  Its local
    # error is O(h^6) (a 5th-order interpolant, measured: tests/
    # test_batched_experiments_torch.py), so outputs inside steps carry more error than
    # the steps' ends (a damped rotation at rtol = atol = 1e-8: 2.6e-7 inside, 3.6e-9
    # at the end, diffrax the same; torchdiffeq's dopri8 interpolates with a 4th-order
    # polynomial)
    "dopri8": (
        (-6.3448349392860401388, 22.1396504998094068976, -30.0610568289666450593,
         19.9990069333683970610, -6.6910181737837595697, 1.0),
        (0.0,) * 6, (0.0,) * 6, (0.0,) * 6, (0.0,) * 6,
        (-39.6107919852202505218, 116.4422149550342161651, -121.4999627731334642623,
         52.2273532792945524050, -7.6142658045872677172, 0.0),
        (20.3761213808791436958, -67.1451318825957197185, 83.1721004639847717481,
         -46.8919164181093621583, 10.7281392630428866124, 0.0),
        (7.3347098826795362023, -16.5672243527496524646, 9.5724507555993664382,
         -0.1890893225010595467, 0.5526637063753648783, 0.0),
        (32.8801774352459155182, -89.9916014847245016028, 87.8406057677205645007,
         -35.7075975946222072821, 4.2186562625665153803, 0.0),
        (-10.1588990526426760954, 22.6237489648532849093, -17.4152107770762969005,
         6.2736448083240352160, -0.6627209125361597559, 0.0),
        (-12.5401268098782561200, 32.2362340167355370113, -28.5903289514790976966,
         10.3160881272450748458, -1.2636789001135462218, 0.0),
        (29.5553001484516038033, -82.1020315488359848644, 81.6630950584341412934,
         -34.7650769866611817349, 5.4106037898590422230, 0.0),
        (-41.7923486424390588923, 116.2662185791119533462, -114.9375291377009418170,
         47.7457971078225540396, -7.0321379067945741781, 0.0),
        (20.3006925822100825485, -53.9020777466385396792, 50.2558364226176017553,
         -19.0082099341608028453, 2.3537586759714983486, 0.0),
    ),
}
"""Dense-output polynomials (:attr:`Tableau.dense`) of the methods that have one."""


def tableau(name: str) -> Tableau:
    """``dopri5`` or ``dopri8``, from torchdiffeq."""
    from torchdiffeq._impl.dopri5 import _DORMAND_PRINCE_SHAMPINE_TABLEAU
    from torchdiffeq._impl.dopri8 import _DOPRI8_TABLEAU

    table = {"dopri5": (_DORMAND_PRINCE_SHAMPINE_TABLEAU, 5), "dopri8": (_DOPRI8_TABLEAU, 8)}
    if name not in table:
        raise ValueError(f"unknown method {name!r}; compiled solves know "
                         f"{', '.join(table)}")
    t, order = table[name]
    tab = Tableau(name, tuple(t.alpha.tolist()), tuple(tuple(b.tolist()) for b in t.beta),
                  tuple(t.c_sol.tolist()), tuple(t.c_error.tolist()), order,
                  DENSE_OUTPUT.get(name))
    if list(tab.a[-1]) != list(tab.b[: len(tab.a[-1])]) or tab.c[-1] != 1.0:
        raise ValueError(f"{name}: the last stage is not the solution (not FSAL)")
    return tab


Field = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``field(t, y, args) -> dy/dt`` (``y`` a vector)."""


def _rms(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(x * x))


def _combine(h, ks, weights):
    """``h * sum_j weights[j] k_j`` over the nonzero weights."""
    out = None
    for w, k in zip(weights, ks):
        if w != 0.0:
            term = k * w
            out = term if out is None else out + term
    return h * out if out is not None else torch.zeros_like(ks[0])


def rk_step(field: Field, tab: Tableau, t, y, f0, h, args):
    """One step: ``(y1, f1, error estimate)``; ``f0 = field(t, y)``."""
    ks = [f0]
    for i, (ci, ai) in enumerate(zip(tab.c, tab.a)):
        yi = y + _combine(h, ks, ai)
        ks.append(field(t + ci * h, yi, args))
        if i == len(tab.a) - 1:
            y1 = yi   # first same as last: the last stage's point is the solution
    return y1, ks[-1], _combine(h, ks, tab.e)


def coefficients(tab: Tableau, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(a, c, b, e)`` of :func:`rk_step_looped` as tensors: ``a`` padded to
    ``(stages, stages)``, ``c`` with the first stage's 0."""
    n_stages = len(tab.a) + 1
    a = torch.zeros((n_stages, n_stages), dtype=like.dtype, device=like.device)
    for i, row in enumerate(tab.a):
        a[i + 1, : len(row)] = torch.tensor(row, dtype=like.dtype)
    as_t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
    return a, as_t((0.0, *tab.c)), as_t(tab.b[:n_stages]), as_t(tab.e[:n_stages])


def rk_step_looped(field: Field, coeffs: tuple[torch.Tensor, ...], t, y, f0, h, args):
    """:func:`rk_step` with the stages in a ``while_loop`` over the padded coefficients
    (:func:`coefficients`): the right-hand side appears once in the traced graph instead
    of once per stage, which keeps ``torch.compile``'s work (and time) small."""
    from torch._higher_order_ops.while_loop import while_loop

    a, c, b, e = coeffs
    n_stages = a.shape[0]
    ks0 = torch.zeros((n_stages, y.shape[0]), dtype=y.dtype, device=y.device)
    ks0 = torch.cat([f0.reshape(1, -1), ks0[1:]])
    one = torch.ones((), dtype=torch.int64, device=y.device)

    def cond(i, ks):
        return i < n_stages

    def body(i, ks):
        row = a.index_select(0, i.reshape(1))[0]
        yi = y + h * _weighted(row, ks)
        ti = t + c.index_select(0, i.reshape(1))[0] * h
        f = field(ti, yi, args)
        return i + 1, ks.index_put((i.reshape(1),), f.reshape(1, -1))

    _, ks = while_loop(cond, body, (one, ks0))
    return y + h * _weighted(b, ks), ks[n_stages - 1], h * _weighted(e, ks)


def _weighted(weights: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    """``sum_i weights[i] * ks[i]`` (stages on the first axis of ``ks``) as a broadcast
    product and sum: inductor fuses it with the code around it (a matmul is a separate
    library call, and an allocation, per stage), and unlike a BLAS product its rounding
    of a row does not depend on how many rows a batch has."""
    return (weights.reshape((-1,) + (1,) * (ks.dim() - 1)) * ks).sum(0)


def dense_output_at(dense: torch.Tensor, y: torch.Tensor, stages: torch.Tensor,
                 theta: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``y(t + theta h)`` inside steps from ``t`` of length ``h``: rows ``y`` ``(m, n)``
    (the steps' starts), their stages ``(S, m, n)``, ``theta`` and ``h`` ``(m,)``;
    ``dense`` the method's :attr:`Tableau.dense` as an ``(S, degree + 1)`` tensor.
    Each row's sum runs over its stages alone, in the same order in any batch."""
    with torch.no_grad():
        p = dense[:, 0:1].expand(-1, theta.shape[0])
        for i in range(1, dense.shape[1]):
            p = p * theta + dense[:, i: i + 1]
        weights = p * theta   # (S, m)
    return y + h[:, None] * (weights[:, :, None] * stages).sum(0)


def initial_step(field: Field, tab: Tableau, t0, y0, f0, rtol: float, atol: float, args):
    """Hairer, Norsett & Wanner's starting step (as torchdiffeq and SciPy)."""
    scale = atol + rtol * y0.abs()
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6),
                     0.01 * d0 / torch.clamp(d1, min=1e-300))
    f1 = field(t0 + h0, y0 + h0 * f0, args)
    d2 = _rms((f1 - f0) / scale) / h0
    big = torch.maximum(d1, d2)
    h1 = torch.where(big <= 1e-15, torch.maximum(torch.full_like(h0, 1e-6), h0 * 1e-3),
                     (0.01 / torch.clamp(big, min=1e-300)) ** (1.0 / (tab.order + 1)))
    return torch.minimum(100 * h0, h1)


@dataclass(frozen=True)
class SolveOptions:
    method: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = 100_000


def make_solve(field: Field, options: SolveOptions, *, loop: str = "python",
               unroll_stages: bool = False) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)``: ``y`` at the sorted output
    times ``ts`` (``t0 <= ts <= t1``, at least one), at ``t1``, whether the solve
    succeeded, and the number of steps taken.  ``t0``, ``t1`` are 0-d tensors.

    ``loop="python"`` runs the steps in a Python loop (eager); ``loop="while_loop"`` as one
    ``while_loop`` for :func:`compiled` (the same step code), its stages a loop of their
    own (:func:`rk_step_looped`) unless ``unroll_stages``: then the right-hand side is
    traced once per stage, which costs more compilation and less per step (the inner
    loop's bookkeeping, its carried tensors handed over, a few allocations and a host
    read per stage, about 1.5 us, is most of a stage's cost when the right-hand side is
    small)."""

    tab = tableau(options.method)
    rtol, atol, max_steps = float(options.rtol), float(options.atol), int(options.max_steps)
    inv_order = 1.0 / tab.order
    ifactor = max_step_growth(tab.name)

    def solve(y0, t0, t1, ts, args):
        n_out = ts.shape[0]
        coeffs = coefficients(tab, y0) if loop == "while_loop" and not unroll_stages else None
        f0 = field(t0, y0, args)
        h0 = initial_step(field, tab, t0, y0, f0, rtol, atol, args)
        ys0 = torch.full((n_out, y0.shape[0]), float("nan"), dtype=y0.dtype,
                         device=y0.device)
        zero = torch.zeros((), dtype=torch.int64, device=y0.device)
        good0 = torch.isfinite(h0) & torch.all(torch.isfinite(f0))

        def cond(t, h, y, f, ys, k, n, good):
            return ((t < t1) | (k < n_out)) & (n < max_steps) & good

        def body(t, h, y, f, ys, k, n, good):
            has_out = k < n_out
            kc = torch.clamp(k, max=n_out - 1)
            target = torch.where(has_out, ts.index_select(0, kc.reshape(1))[0], t1)
            gap = target - t
            clipped = gap <= h
            h_try = torch.where(clipped, gap, h)
            if loop == "while_loop" and not unroll_stages:
                y1, f1, err = rk_step_looped(field, coeffs, t, y, f, h_try, args)
            else:
                y1, f1, err = rk_step(field, tab, t, y, f, h_try, args)
            ratio = _rms(err / (atol + rtol * torch.maximum(y.abs(), y1.abs())))
            accept = (ratio <= 1.0) & torch.all(torch.isfinite(y1))
            hit = accept & clipped & has_out
            t_new = torch.where(accept, torch.where(clipped, target, t + h_try), t)
            y_new = torch.where(accept, y1, y)
            f_new = torch.where(accept, f1, f)
            row = torch.where(hit, y1, ys.index_select(0, kc.reshape(1))[0])
            ys_new = ys.index_put((kc.reshape(1),), row.reshape(1, -1))
            # the next step: torchdiffeq's factor; a step shortened to land on an output
            # keeps the proposal it was shortened from
            factor = torch.where(
                ratio == 0, torch.full_like(ratio, ifactor),
                torch.clamp(SAFETY * torch.clamp(ratio, min=1e-300) ** (-inv_order),
                            max=ifactor))
            factor = torch.where(accept, torch.clamp(factor, min=1.0),
                                 torch.clamp(factor, min=DFACTOR))
            factor = torch.where(torch.isfinite(ratio), factor, torch.full_like(ratio, DFACTOR))
            h_new = torch.where(accept & clipped, torch.maximum(h, h_try * factor),
                                h_try * factor)
            h_ok = torch.isfinite(h_new) & (h_new > 1e-14 * torch.clamp(t_new.abs(), min=1.0))
            good_new = good & (h_ok | (h_try == 0))
            h_new = torch.where(h_ok, h_new, h)
            return (t_new, h_new, y_new, f_new, ys_new, k + hit.to(k.dtype),
                    n + (h_try > 0).to(n.dtype), good_new)

        state = (t0.clone(), h0, y0.clone(), f0, ys0, zero.clone(), zero.clone(), good0)
        if loop == "while_loop":
            from torch._higher_order_ops.while_loop import while_loop

            state = while_loop(cond, body, state)
        else:
            while bool(cond(*state)):
                state = body(*state)
        t, _, y, _, ys, k, n, good = state
        ok = good & (t >= t1) & (k >= n_out)
        return ys, y, ok, n

    return solve


INDUCTOR_OPTIONS = {
    # concatenations (the stacked outputs of generated right-hand sides, the sensitivity
    # system) as fused pointwise code: on CPU inductor otherwise writes each input into
    # a view of the result, and every such view is a tensor created in the loop body
    # each iteration (suite case 004: the solve 2.8x faster)
    "force_pointwise_cat": True,
}
"""Inductor options of :func:`compiled` (``torch.compile(options=...)``: these
compilations only)."""
SIMD_MIN_ENTRIES = 1024
""":func:`compiled` generates SIMD kernels when its largest tensor argument has at least
this many entries, scalar kernels below: a solve of a few dozen states and
sensitivities gains nothing from SIMD (the same time per evaluation on suite cases
001/002/004), and scalar code compiles 1.5-3x faster."""


def compiled(fn: Callable[..., Any], *, simd: bool | None = None) -> Callable[..., Any]:
    """``fn`` compiled whole by ``torch.compile`` (inductor, C++ wrapper, no graph breaks,
    :data:`INDUCTOR_OPTIONS`); SIMD kernels or not as ``simd`` says, ``None``: decided on
    the first call (:data:`SIMD_MIN_ENTRIES`).

    The first call per input signature traces and compiles (seconds to tens of seconds);
    later calls run native code."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp_wrapper = True
    # one compiled solve per problem and signature: many problems in one process
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)

    def build(vectorize: bool) -> Callable[..., Any]:
        options = dict(INDUCTOR_OPTIONS)
        if not vectorize:   # else inductor's default: the CPU's vector instructions
            options["cpp.vec_isa_ok"] = False
        return torch.compile(fn, fullgraph=True, dynamic=False, options=options)

    if simd is not None:
        return build(simd)
    built: list[Callable[..., Any]] = []

    def call(*args):
        if not built:
            leaves = torch.utils._pytree.tree_leaves(args)
            largest = max((x.numel() for x in leaves if isinstance(x, torch.Tensor)),
                          default=0)
            built.append(build(largest >= SIMD_MIN_ENTRIES))
        return built[0](*args)

    return call


def solver(field: Field, options: SolveOptions, *, compile: bool,
           unroll_stages: bool = False) -> Callable[..., Any]:
    """:func:`make_solve`, compiled (stages unrolled or looped) or eager."""
    if compile:
        return compiled(make_solve(field, options, loop="while_loop",
                                   unroll_stages=unroll_stages))
    return make_solve(field, options)


# ---------------------------------------------------------------------- batched solves
def _rms_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(x * x, dim=-1))


def initial_step_batched(field: Field, tab: Tableau, t0, y0, f0, rtol: float, atol: float,
                         args):
    """:func:`initial_step` of every experiment of a batch (rows of ``y0``)."""
    scale = atol + rtol * y0.abs()
    d0, d1 = _rms_rows(y0 / scale), _rms_rows(f0 / scale)
    h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6),
                     0.01 * d0 / torch.clamp(d1, min=1e-300))
    f1 = field(t0 + h0, y0 + h0[:, None] * f0, args)
    d2 = _rms_rows((f1 - f0) / scale) / h0
    big = torch.maximum(d1, d2)
    h1 = torch.where(big <= 1e-15, torch.maximum(torch.full_like(h0, 1e-6), h0 * 1e-3),
                     (0.01 / torch.clamp(big, min=1e-300)) ** (1.0 / (tab.order + 1)))
    return torch.minimum(100 * h0, h1)


COMPACT_ROWS = 8
"""Batched solves with ``restrict``: once at least this many rows (and an eighth of the
batch) have finished, steps evaluate only the rows still moving."""


def make_batched_solve(field: Field, options: SolveOptions, *,
                       stacked_stages: bool = False,
                       restrict: Callable[[Any, torch.Tensor], Any] | None = None,
                       dense_output: bool = False) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)`` for a batch of ``E``
    independent problems solved together: ``y0`` is ``(E, n)``, ``t0`` and ``t1`` are
    ``(E,)``, ``ts`` is ``(E, N)`` (each row sorted, in ``[t0, t1]``; pad a shorter grid
    with its ``t1``); ``field(t, y, args)`` takes ``t`` of shape ``(E,)`` and ``y`` of
    shape ``(E, n)``.  Returns ``ys`` ``(E, N, n)``, ``y1`` ``(E, n)``, ``ok`` ``(E,)``
    and the steps per problem ``(E,)``.

    Every problem keeps its **own** time, step size and error control, exactly as
    :func:`make_solve` would solve it alone (same tableau, controller, initial step,
    steps shortened to land on its output times): only the right-hand side is evaluated
    for all problems at once.  A problem that has finished (or failed) stops moving
    while the others go on (its rows take zero-length steps, which cost nothing but the
    batched evaluation).  So results agree with one-at-a-time solves to rounding, not
    merely to the solver tolerance.

    The loop is eager Python.  Autograd may flow through it (back-propagation through
    the steps): the step-size decisions are taken on detached values, so gradients are
    those of the discrete solution for the step sequence taken.

    ``stacked_stages``: each stage's combination of the previous stages is one weighted
    sum of the stacked stages (a few tensor operations, and autograd nodes, per stage)
    instead of a product and a sum per nonzero coefficient, as :func:`make_solve`.  The
    same method, summed in another order: results differ from :func:`make_solve`'s in
    the last bits, which a step-size decision can amplify to ~1e-10, so the
    forward-sensitivity path (batched equals unbatched to 1e-10) keeps the term-by-term
    sums; back-propagation through the steps, where the per-operation cost dominates
    small batches, stacks.

    ``restrict(args, rows)``: ``args`` for the given rows only (a tensor of row
    indices).  With it, once :data:`COMPACT_ROWS` rows or more (and at least an eighth
    of the batch) have finished or failed, a step evaluates the rows still moving only
    instead of giving the others zero-length steps; the results are the same.

    ``dense_output``: steps are not shortened to land on the output times; outputs
    inside a step come from the method's dense output (:attr:`Tableau.dense`; ``dopri8``:
    the interpolant diffrax's ``Dopri8`` and so the JAX backend use), from the step's
    stages, at a few operations per output.  Fewer steps (the step size follows the
    error alone), outputs accurate to the interpolant's order rather than the
    method's.  Each row's steps stay its own: results do not depend on the batch."""
    tab = tableau(options.method)
    if dense_output and tab.dense is None:
        raise ValueError(f"{tab.name} has no dense output here; methods with one: "
                         f"{', '.join(DENSE_OUTPUT)}")
    dense = None
    rtol, atol, max_steps = float(options.rtol), float(options.atol), int(options.max_steps)
    inv_order = 1.0 / tab.order
    ifactor = max_step_growth(tab.name)

    def step(t, y, f0, h, args, coeffs):
        hc = h[:, None]
        if coeffs is None:   # term by term, as make_solve
            ks = [f0]
            for ci, ai in zip(tab.c, tab.a):
                yi = y + _combine(hc, ks, ai)
                ks.append(field(t + ci * h, yi, args))
            stages = torch.stack(ks) if dense_output else None
            return yi, ks[-1], _combine(hc, ks, tab.e), stages
        # the stages so far stacked (first axis) and combined by one weighted sum per
        # stage (_weighted): a handful of operations (and autograd nodes) per stage
        # instead of two per nonzero coefficient, which is most of a step's cost when the
        # batch is small; a row takes the same steps alone as in any batch
        a_rows, c, e_row = coeffs
        with torch.no_grad():
            times = t[:, None] + hc * c
        ks = [f0]
        yi = y
        for i, ai in enumerate(a_rows):
            yi = torch.addcmul(y, hc, _weighted(ai, torch.stack(ks)))
            ks.append(field(times[:, i], yi, args))
        stages = torch.stack(ks)
        return yi, ks[-1], hc * _weighted(e_row, stages), stages

    def interpolate(y, stages, t, h, ts, pairs):
        """Dense output at ``ts[r, j]`` for the (row, slot) ``pairs`` of the step from
        ``t`` (rows of ``y``, ``stages`` ``(S, E, n)``) of length ``h``: ``(len(pairs),
        n)``."""
        r, j = pairs[:, 0], pairs[:, 1]
        with torch.no_grad():
            theta = (ts[r, j] - t[r]) / h[r]
        return dense_output_at(dense, y[r], stages[:, r], theta, h[r])

    def stage_coefficients(like):
        """``stacked_stages``: the rows of ``a``, ``c`` and the error weights as
        tensors."""
        as_t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
        return [as_t(ai) for ai in tab.a], as_t(tab.c), as_t(tab.e[: len(tab.a) + 1])

    def solve(y0, t0, t1, ts, args):
        nonlocal dense
        E, n_out = ts.shape
        coeffs = stage_coefficients(y0) if stacked_stages else None
        if dense_output and (dense is None or dense.dtype != y0.dtype
                             or dense.device != y0.device):
            dense = torch.tensor(tab.dense, dtype=y0.dtype, device=y0.device)
        f0 = field(t0, y0, args)
        with torch.no_grad():
            h = initial_step_batched(field, tab, t0, y0.detach(), f0.detach(), rtol, atol,
                                     args)
        good = torch.isfinite(h) & torch.all(torch.isfinite(f0.detach()), dim=1)
        ys = torch.full((E, n_out, y0.shape[1]), float("nan"), dtype=y0.dtype,
                        device=y0.device)
        k = torch.zeros(E, dtype=torch.int64, device=y0.device)
        if dense_output:   # outputs at the start are the start
            at_start = ts <= t0[:, None]
            ys = torch.where(at_start[:, :, None], y0[:, None, :], ys)
            k = at_start.sum(1)
        n = torch.zeros_like(k)
        t, y, f = t0.clone(), y0, f0
        slots = torch.arange(n_out, device=y0.device)
        rows = torch.arange(E, device=y0.device)
        sub = None
        while True:
            # dense output: every output is filled by the time t reaches t1 (outputs
            # past t1 are never filled: the solve fails, it does not loop)
            active = (((t < t1) if dense_output else ((t < t1) | (k < n_out)))
                      & (n < max_steps) & good)
            n_active = int(active.sum())
            if not n_active:
                break
            has_out = (k < n_out) if not dense_output else torch.zeros_like(active)
            kc = torch.clamp(k, max=n_out - 1)
            target = torch.where(has_out, ts[rows, kc], t1)
            gap = torch.where(active, target - t, torch.zeros_like(t))
            clipped = gap <= h
            h_try = torch.where(clipped, gap, h)
            if restrict is not None and E - n_active >= max(COMPACT_ROWS, E // 8):
                # only the rows still moving (the others' zero-length step would give
                # y1 = y, f1 = f, err = 0: exactly what they get here)
                moving = active.nonzero()[:, 0]
                if sub is None or not torch.equal(sub[0], moving):
                    # the rows' own args, and each row's place among them (dense output)
                    local = torch.full((E,), -1, dtype=torch.int64, device=y0.device)
                    local[moving] = torch.arange(moving.shape[0], device=y0.device)
                    sub = (moving, restrict(args, moving), local)
                y1s, f1s, errs, stages = step(t[moving], y[moving], f[moving],
                                              h_try[moving], sub[1], coeffs)
                y1 = y.index_put((moving,), y1s)
                f1 = f.index_put((moving,), f1s)
                err = y.detach().new_zeros(y.shape).index_put((moving,), errs.detach())
            else:
                moving = None
                y1, f1, err, stages = step(t, y, f, h_try, args, coeffs)
            with torch.no_grad():
                yd, y1d = y.detach(), y1.detach()
                ratio = _rms_rows(err.detach() / (atol + rtol * torch.maximum(yd.abs(),
                                                                               y1d.abs())))
                accept = active & (ratio <= 1.0) & torch.all(torch.isfinite(y1d), dim=1)
                hit = accept & clipped & has_out
                t_new = torch.where(accept, torch.where(clipped, target, t + h_try), t)
                factor = torch.where(
                    ratio == 0, torch.full_like(ratio, ifactor),
                    torch.clamp(SAFETY * torch.clamp(ratio, min=1e-300) ** (-inv_order),
                                max=ifactor))
                factor = torch.where(accept, torch.clamp(factor, min=1.0),
                                     torch.clamp(factor, min=DFACTOR))
                factor = torch.where(torch.isfinite(ratio), factor,
                                     torch.full_like(ratio, DFACTOR))
                h_new = torch.where(accept & clipped, torch.maximum(h, h_try * factor),
                                    h_try * factor)
                h_ok = torch.isfinite(h_new) & (h_new > 1e-14 * torch.clamp(t_new.abs(),
                                                                           min=1.0))
                good = good & (h_ok | (h_try == 0) | ~active)
                h = torch.where(active & h_ok, h_new, h)
                n = n + (active & (h_try > 0)).to(n.dtype)
                if dense_output:   # the outputs this step passed
                    inside = (accept[:, None] & (slots[None, :] >= k[:, None])
                              & (ts <= t_new[:, None]))
                    k = k + inside.sum(1)
                else:
                    k = k + hit.to(k.dtype)
                    at = hit[:, None] & (slots[None, :] == kc[:, None])
            if dense_output:
                pairs = inside.nonzero()
                if pairs.shape[0]:
                    if moving is None:
                        values = interpolate(y, stages, t, h_try, ts, pairs)
                    else:   # the stages are those of the moving rows only
                        at_local = torch.stack([sub[2][pairs[:, 0]], pairs[:, 1]], 1)
                        values = interpolate(y[moving], stages, t[moving], h_try[moving],
                                             ts[moving], at_local)
                    ys = ys.index_put((pairs[:, 0], pairs[:, 1]), values)
            keep = accept[:, None]
            y = torch.where(keep, y1, y)
            f = torch.where(keep, f1, f)
            if not dense_output:
                ys = torch.where(at[:, :, None], y1[:, None, :], ys)
            t = t_new
        ok = good & (t >= t1) & (k >= n_out)
        return ys, y, ok, n

    return solve
