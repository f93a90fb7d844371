"""Options of the PyTorch executor (:class:`TorchOptions`) and the limits it works with."""

from __future__ import annotations

from dataclasses import dataclass

from petab_sciml.simulation.plan import SimulationError

SENSITIVITIES = ("forward", "autograd", "adjoint")
FORWARD_METHODS = ("dopri5", "dopri8")
"""Methods of our own Runge-Kutta loop (forward sensitivities, batched solves)."""
TORCHDIFFEQ_METHODS = ("dopri5", "dopri8", "bosh3", "adaptive_heun", "fehlberg2")
IMPLICIT_METHODS = ("kvaerno5",)
"""Implicit methods for stiff models (:mod:`~petab_sciml.backends.torch.implicit`): eager,
``sensitivity="autograd"`` (back-propagation through the steps; ``forward``, the
default, is resolved to it, as JAX's implicit solvers run in reverse mode)."""
SYMBOLIC_JACOBIAN_MAX = 20_000
"""Largest right-hand-side Jacobian (entries) compiled from symbolic derivatives."""
UNROLL_STAGES_MAX = 256
"""``unroll_stages=None``: compiled solves unroll their stages when the right-hand side
has symbolic derivatives (no network in it) and it and its Jacobian are at most this
many expressions."""
FLOAT32_TOLERANCE = 1e-5
"""Smallest ``rtol``/``atol`` used when the problem runs in float32 (tighter tolerances
are below float32's resolution and make the step size collapse)."""
FORWARD_BATCH_ENTRIES = 2**21
"""Most states and forward sensitivities (entries) of one batched solve: larger batches
are split (about 16 MB per state vector in float64, of which a step holds ~15)."""
STEADY_STATE_DOUBLINGS = 60
"""A steady-state period gives up (a failed solve) after horizons 1, 2, ..., 2**59."""


@dataclass(frozen=True)
class TorchOptions:
    method: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    sensitivity: str = "forward"
    """``forward``: forward sensitivities integrated with the states (error control on
    both); ``autograd``: back-propagation through the solver's steps (batched solves,
    else torchdiffeq's); ``adjoint``:
    ``torchdiffeq.odeint_adjoint``."""
    max_steps: int = 100_000
    compile: bool | None = None
    """True: compile every solve with ``torch.compile`` (``forward`` sensitivities only;
    the native module's default); False: eager solves; None (the numpy API's default):
    eager until compiling pays (:mod:`~petab_sciml.backends.torch.auto_compile`)."""
    unroll_stages: bool | None = None
    """Compiled solves (``compile=True``): trace the right-hand side once per Runge-Kutta
    stage (``True``) instead of looping over the stages (``False``); ``None``: unrolled
    when the right-hand side has no network and symbolic derivatives (at most
    :data:`UNROLL_STAGES_MAX` expressions with its Jacobian), else looped.  Unrolled,
    a step saves the stage loop's bookkeeping for more compilation, which grows with
    the right-hand side (a network in it is traced once per stage,
    ``benchmarks/bench_torch_stages.py``)."""
    ordered_products: bool | None = None
    """Compute the networks' small Linear products
    (:func:`petab_sciml.batch_invariance.takes_ordered_product`) as elementwise products
    summed in one fixed order (``backends/torch/ordered.py``), so that a batched solve
    gives each experiment the bits it gets solved alone.  ``None``: where the solves are
    eager and the right-hand side may have kinks (``SimulationPlan.rhs_smooth`` false:
    a ReLU network, a piecewise formula); there a last-bit difference can flip the step
    controller's decisions.  Smooth right-hand sides keep ``torch.nn.Linear``: ordered
    products cost more in eager PyTorch
    (``benchmarks/investigations/torch_ordered_products.py``), and without kinks
    batched and unbatched agree to far below the solver tolerance with the library's
    products."""
    term_sums: bool | None = None
    """Compile the right-hand side as a sum of terms (polynomial parts vectorized,
    ``petab_sciml/simulation/term_sums.py``) instead of straight-line code; None: for
    models of ``term_sums.MIN_STATES`` states and more, where straight-line code is
    slow to compile and to run."""
    batch_experiments: bool = True
    """Solve experiments of the same structure (same number of periods, no steady state)
    as one batched solve
    (:func:`~petab_sciml.backends.torch.batched_ode.make_batched_solve`: states
    ``(n_experiments, n_states)``, each experiment with its own step sizes) when there
    are at least two of them (``autograd``: from one), the solves are eager
    (``compile=False``) and the sensitivity is ``forward`` or ``autograd`` with
    ``dopri5``/``dopri8``; with forward sensitivities, batches of at most
    :data:`FORWARD_BATCH_ENTRIES` states and sensitivities.  False: one solve after
    another (the unbatched reference path; ``autograd``: each experiment a batch of
    one, the same solver)."""


def check_options(options: TorchOptions) -> None:
    """Raise :class:`SimulationError` on an unknown sensitivity or method, or on
    ``compile=True`` without forward sensitivities."""
    if options.sensitivity not in SENSITIVITIES:
        raise SimulationError(f"unknown sensitivity {options.sensitivity!r}; use "
                              f"{', '.join(SENSITIVITIES)}")
    if options.method in IMPLICIT_METHODS:
        if options.sensitivity != "autograd" or options.compile:
            raise SimulationError(f"method {options.method!r} (implicit) runs eager with "
                                  "sensitivity='autograd'")
        return
    methods = FORWARD_METHODS if options.sensitivity == "forward" else TORCHDIFFEQ_METHODS
    methods = (*methods, *IMPLICIT_METHODS)
    if options.method not in methods:
        raise SimulationError(f"unknown torch ODE method {options.method!r} for "
                              f"sensitivity {options.sensitivity!r}; known: "
                              f"{', '.join(methods)}")
    if options.compile and options.sensitivity != "forward":
        raise SimulationError("compile=True needs sensitivity='forward'")


def resolved_options(options: TorchOptions) -> TorchOptions:
    """``options`` with what is left open decided: ``compile=None`` eager (the
    :class:`~petab_sciml.backends.torch.auto_compile.AutoCompileExecutor` decides above
    this), and an implicit method's default ``forward`` sensitivity ``autograd``."""
    from dataclasses import replace

    if options.compile is None:
        options = replace(options, compile=False)
    if options.method in IMPLICIT_METHODS and options.sensitivity == "forward":
        options = replace(options, sensitivity="autograd")
    return options
