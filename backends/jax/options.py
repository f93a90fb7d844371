"""Options of the JAX simulation (:class:`JaxOptions`) and how ``"auto"`` choices resolve."""

from __future__ import annotations

from dataclasses import dataclass

FORWARD_MODE_MAX = 512
"""``sensitivity="auto"`` uses forward sensitivities up to this many parameters (entries of
``theta`` and network arrays) times experiments solved in one batch, reverse mode above
(forward sensitivities also for networks inside the right-hand side: their error
control keeps the gradient accurate across the network's kinks, see docs/simulation.md)."""

BATCHED_CHECKPOINTS = 64
"""Reverse mode's default checkpoints when experiments are solved in batches (``vmap``).
Every checkpoint holds the loop state of the whole batch (states, outputs saved so far:
``experiments x times x states``), and diffrax allocates, fills and gathers all of them
on every call, so fewer checkpoints than diffrax's default save that memory traffic;
experiments that take more steps than this recompute steps.  Results are the same bit
for bit: checkpoints only decide what is recomputed."""

SEQUENTIAL_BATCH_MAX = 4
"""With ``batch_experiments=None`` (default), batches of up to this many experiments
are solved one after another (``lax.map``) instead of as one ``vmap``: a batched
``while_loop`` selects every entry of the solver's loop state (and its checkpoints) on
every step, which costs more than a few sequential solves; larger batches share the
network's products across experiments and stay batched.  Results are the same up to
round-off either way (:mod:`.stage_sums`)."""

SENSITIVITIES = ("auto", "forward", "forward-ad", "reverse", "adjoint")
SOLVERS = ("tsit5", "dopri5", "dopri8", "kvaerno3", "kvaerno4", "kvaerno5")


@dataclass(frozen=True)
class JaxOptions:
    solver: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = 100_000
    sensitivity: str = "auto"
    checkpoints: int | None = None
    """Checkpoints of ``sensitivity="reverse"`` (``RecursiveCheckpointAdjoint``); None:
    :data:`BATCHED_CHECKPOINTS` for experiments solved in batches, else diffrax's
    default, about ``sqrt(2 * max_steps)`` (447).  Each holds the solver's loop
    state (states, step-size controller, outputs saved so far), never the network's
    arrays: with few states, memory does not depend on this number or on the network's
    size (see docs/simulation.md); fewer checkpoints than steps recompute steps."""
    batch_experiments: bool | None = None
    """True: solve experiments of the same structure as one batched (``vmap``) solve;
    False: one after another (``lax.map``), the unbatched reference path; None
    (default): batched, except batches of up to :data:`SEQUENTIAL_BATCH_MAX`
    experiments (:meth:`resolved_batching`)."""
    summed_weight_cotangents: bool = True
    """Reverse mode: the cotangents of network weights and biases (``ops.linear``)
    that all experiments of a batched solve share are summed over the batch as one
    matrix product per Runge-Kutta stage (``ops.batch_summed_weight_cotangents``)
    instead of one outer product per experiment.  Values unchanged bit for bit,
    gradients up to the order of a sum.  False: JAX's own derivative rules (for
    comparison).  Never with an implicit solver (:attr:`implicit`)."""

    factormax: float | None = None
    """The largest factor by which one step may exceed the last (diffrax's
    ``PIDController(factormax=)``); None: the solver's
    (``petab_sciml.simulation.steps.max_step_growth``)."""
    pi_coefficients: tuple[float, float] | None = None
    """``(pcoeff, icoeff)`` of diffrax's ``PIDController``; None:
    ``petab_sciml.simulation.steps.pi_coefficients`` of the solver and the resolved
    sensitivity: a PI controller for explicit solvers in reverse mode / forward-ad
    (right gradients on mildly stiff models), diffrax's I controller ``(0, 1)``
    otherwise."""
    term_sums: bool | None = None
    """Compile the right-hand side as a sum of terms (polynomial parts vectorized,
    ``petab_sciml/simulation/term_sums.py``) instead of straight-line code; None: for
    models of ``term_sums.MIN_STATES`` states and more, where straight-line code is
    slow to compile and to run."""
    devices: int | None = None
    """Batched experiments are split into one share per device, each solved on its
    device (``backends/jax/devices.py``): this many of JAX's local devices, None: all
    of them.  On a CPU the backend gives JAX one device per core unless the user set
    JAX's device count or JAX computed before the backend was first used
    (``devices.use_cpu_cores_by_default``); batches with fewer than
    ``MIN_EXPERIMENTS_PER_DEVICE`` experiments per device are not split."""

    @property
    def implicit(self) -> bool:
        """Whether :attr:`solver` is implicit (the Kvaerno family): its Newton iteration
        takes the Jacobian of the right-hand side by forward-mode autodiff."""
        return self.solver.lower().startswith("kvaerno")

    def resolved_sensitivity(self, n_parameters: int, n_batch: int = 1) -> str:
        """``n_batch``: the most experiments solved together in one batched solve."""
        if self.sensitivity == "auto":
            if self.implicit:
                # an implicit solver on the sensitivity system would run Newton on
                # n_x * (n_x + n_p) unknowns: differentiate through the solver instead
                return "reverse"
            # forward sensitivities cost n_p tangents per experiment and step, reverse
            # mode a fixed tape overhead: with many experiments batched, reverse wins
            n_batch = n_batch if self.batch_experiments is not False else 1
            return "forward" if n_parameters * n_batch <= FORWARD_MODE_MAX else "reverse"
        return self.sensitivity

    def resolved_batching(self, n_batch: int) -> bool:
        """Whether experiments of one structure are solved as one batched (``vmap``)
        solve: :attr:`batch_experiments` when set, else True unless the largest batch
        has at most :data:`SEQUENTIAL_BATCH_MAX` experiments (``n_batch``)."""
        if self.batch_experiments is not None:
            return bool(self.batch_experiments)
        return n_batch > SEQUENTIAL_BATCH_MAX

    def resolved_checkpoints(self, n_batch: int, batched: bool = True) -> int | None:
        """Checkpoints of reverse mode: :attr:`checkpoints`, else
        :data:`BATCHED_CHECKPOINTS` when ``n_batch`` (the most experiments solved
        together) > 1 experiments are solved in batches (``batched``: resolved
        :meth:`resolved_batching`), else None (diffrax's default)."""
        if self.checkpoints is None and batched and n_batch > 1:
            return BATCHED_CHECKPOINTS
        return self.checkpoints
