"""The solve of one period with forward sensitivities (``sensitivity="forward"``).

The solve is a ``jax.custom_vjp`` whose forward pass integrates the forward sensitivity
system ``dS/dt = df/dx S + df/dp`` along with the states (one diffrax solve, never
differentiated by JAX; the error control covers the sensitivities too, as in
CVODES/AMICI, which keeps gradients accurate across kinks such as ReLU) and whose
backward pass contracts the cotangents with ``S``.  ``p``:
:mod:`.sensitivity_parameters`.

Under ``jax.vmap`` over starts with common times (batches of native models), all starts
are solved as one system (:mod:`.lanes`), and the gradient comes from reverse mode
through that solve instead: the cost of forward sensitivities grows with starts times
parameters, reverse mode's with starts only.  Unbatched calls are unchanged.
"""

from __future__ import annotations

from typing import Any

import jax

from . import ops
from .lanes import solve_lanes, vmap_as_lanes
from .options import JaxOptions
from .period import PeriodSolve
from .sensitivity_parameters import SensitivityParameters
from .solvers import diffrax_solver, save_at, step_controller, succeeded
from .stage_sums import diffeqsolve
from .steady_state import steady_state_event
from .terms import VectorField


def forward_sensitivity_solver(field: VectorField, nets: Any, parameters: SensitivityParameters,
                               options: JaxOptions, *, steady_state: bool) -> PeriodSolve:
    """``solve(x0, theta, outs, arrays, t0, t1, ts) -> (x(ts), x(t1), ok)`` of the ODE
    ``field`` with the networks' arrays ``nets``, differentiable by its forward
    sensitivities; ``steady_state``: some period of the plan runs to steady state (then
    batches of starts are a plain ``vmap``)."""
    import jax.numpy as jnp

    sens = _ForwardSensitivities(field, parameters, options, steady_state)
    plain_one, sens_one, grad_one = sens.states, sens.with_sensitivities, sens.cotangents
    if not steady_state:
        plain_one = vmap_as_lanes(plain_one, sens.states_of_lanes)
        sens_one = vmap_as_lanes(sens_one, sens.states_of_lanes,
                                 finish=sens.no_sensitivities)
        # S is not an argument of the lanes' gradient: it is dropped (args[:9])
        grad_one = vmap_as_lanes(grad_one, sens.cotangents_of_lanes, always=(0, 1, 7, 8),
                                 keep=9)

    @jax.custom_vjp
    def core(x0, p, arrays, outs_template, t0, t1, ts):
        return plain_one(x0, p, arrays, outs_template, t0, t1, ts)

    def core_fwd(x0, p, arrays, outs_template, t0, t1, ts):
        (ys, s_ts), (y1, s1), ok = sens_one(x0, p, arrays, outs_template, t0, t1, ts)
        out = (ys, y1, ok)
        return out, (s_ts, s1, x0, p, arrays, outs_template, t0, t1, ts)

    def core_bwd(res, cts):
        s_ts, s1, x0, p, arrays, outs_template, t0, t1, ts = res
        ct_ys, ct_end, _ = cts
        zeros = jax.tree_util.tree_map(jnp.zeros_like, (arrays, outs_template, t0, t1, ts))
        g_x0, g_p = grad_one(x0, p, arrays, outs_template, t0, t1, ts, ct_ys, ct_end,
                             s_ts, s1)
        return (g_x0, g_p, *zeros)

    core.defvjp(core_fwd, core_bwd)

    def solve(x0, theta, outs, arrays, t0, t1, ts):
        template = [jnp.zeros_like(o) for o in outs]
        return core(x0, parameters.pack(theta, outs, nets), arrays, template, t0, t1, ts)

    return solve


class _ForwardSensitivities:
    """The solves and the cotangents behind :func:`forward_sensitivity_solver`; every
    solve takes ``(x0, p, arrays, outs_template, t0, t1, ts)``."""

    def __init__(self, field: VectorField, parameters: SensitivityParameters,
                 options: JaxOptions, steady_state: bool):
        import diffrax
        import jax.numpy as jnp

        self.field = field
        self.parameters = parameters
        self.options = options
        self.steady_state = steady_state
        self.plain_term = diffrax.ODETerm(lambda t, x, a: self.field_p(t, x, *a))
        self.controller = step_controller(options)
        self.aug_term = diffrax.ODETerm(self.augmented)
        # these solves are never differentiated by JAX: plain while loops
        self.lax_solver = diffrax_solver(options.solver, scan_kind="lax")
        self.lax_loop = diffrax.ForwardMode()
        if not steady_state:
            self.reverse_solver = diffrax_solver(options.solver)
            self.reverse_adjoint = diffrax.RecursiveCheckpointAdjoint(
                checkpoints=options.checkpoints)
            n_x, n_p, tree = parameters.n_x, parameters.n_p, parameters.tree
            self.s0_template = self.initial_sensitivities(
                jnp.zeros((n_x,)), parameters.as_tree(jnp.zeros((n_p,))) if tree else None)

    # ------------------------------------------------------------------ right-hand sides
    def field_p(self, t, x, p, arrays, outs_template, p_is_tree=None):
        """The right-hand side as a function of ``(x, p)``."""
        theta, outs, nets_ = self.parameters.unpack(p, outs_template, p_is_tree)
        return self.field(t, x, theta, outs, arrays, nets_)

    def augmented(self, t, y, a):
        """``(dx/dt, dS/dt)`` of ``y = (x, S)``, ``a = (p, arrays, outs_template)``."""
        # the Jacobians below enter S, and S the step-size control: small networks'
        # products keep one order for every batch (ops.ordered_linear)
        with ops.batch_invariant_jacobians():
            return self._augmented_traced(t, y, a)

    def _augmented_traced(self, t, y, a):
        import jax.numpy as jnp

        x, sens = y
        p, arrays, outs_template = a
        n_x, n_p, n = self.parameters.n_x, self.parameters.n_p, self.parameters.n

        def f(x, p):
            return self.field_p(t, x, p, arrays, outs_template)

        if n_x < n:
            # dS/dt = J_x S + [0 | J_p], J from n_x reverse passes (cheaper than n
            # forward passes when there are fewer states than parameters)
            fx, vjp = jax.vjp(f, x, p)
            jx, jp = jax.vmap(vjp)(jnp.eye(n_x, dtype=x.dtype))
            if self.parameters.tree:
                s_x, s_p = sens
                ds_p = jax.tree_util.tree_map(
                    lambda s, j: jnp.tensordot(jx, s, axes=1) + j, s_p, jp)
                return fx, (jx @ s_x, ds_p)
            # J_x S as a broadcast product and sum: fuses with the rest (a dot here
            # costs a separate kernel per stage)
            ds = jnp.sum(jx[:, :, None] * sens[None], axis=1) + jnp.concatenate(
                [jnp.zeros((n_x, n_x), x.dtype), jp], 1)
            return fx, ds
        e = jnp.eye(n_p, n, n_x, dtype=x.dtype)
        fx, ds = jax.vmap(lambda sx, sp: jax.jvp(f, (x, p), (sx, sp)),
                          in_axes=(1, 1), out_axes=(None, 1))(sens, e)
        return fx, ds

    def initial_sensitivities(self, x0, p):
        """``S(t0)``: the identity for ``x0``, zeros for ``p``."""
        import jax.numpy as jnp

        n_x = self.parameters.n_x
        if self.parameters.tree:
            return (jnp.eye(n_x, dtype=x0.dtype), jax.tree_util.tree_map(
                lambda a: jnp.zeros((n_x,) + a.shape, x0.dtype), p))
        return jnp.eye(n_x, self.parameters.n, dtype=x0.dtype)

    def _event(self, rates, t1, ts):
        if not self.steady_state:
            return None
        return steady_state_event(rates, t1, ts, self.options)

    # ------------------------------------------------------------------ one start
    def states(self, x0, p, arrays, outs_template, t0, t1, ts):
        """``(x(ts), x(t1), ok)`` without sensitivities."""
        event = self._event(lambda t, x, a: [(self.field_p(t, x, *a), x)], t1, ts)
        sol = diffeqsolve(
            self.plain_term, self.lax_solver, t0, t1, None, x0, (p, arrays, outs_template),
            saveat=save_at(ts), stepsize_controller=self.controller,
            max_steps=self.options.max_steps, adjoint=self.lax_loop, throw=False,
            event=event)
        return sol.ys[0], sol.ys[1][-1], succeeded(sol)

    def with_sensitivities(self, x0, p, arrays, outs_template, t0, t1, ts):
        """``((x(ts), S(ts)), (x(t1), S(t1)), ok)``."""
        s0 = self.initial_sensitivities(x0, p)

        def rates(t, y, a):   # states and sensitivities must both settle (AMICI)
            fx, ds = self.augmented(t, y, a)
            # S is one matrix, or one block per network array for large networks
            return [(fx, y[0])] + list(zip(jax.tree_util.tree_leaves(ds),
                                           jax.tree_util.tree_leaves(y[1])))

        sol = diffeqsolve(
            self.aug_term, self.lax_solver, t0, t1, None, (x0, s0),
            (p, arrays, outs_template), saveat=save_at(ts),
            stepsize_controller=self.controller, max_steps=self.options.max_steps,
            adjoint=self.lax_loop, throw=False, event=self._event(rates, t1, ts))
        return sol.ys[0], _last(sol.ys[1]), succeeded(sol)

    def cotangents(self, x0, p, arrays, outs_template, t0, t1, ts, ct_ys, ct_end, s_ts, s1):
        """Cotangents of ``x0`` and ``p`` from the forward sensitivities."""
        import jax.numpy as jnp

        if self.parameters.tree:
            (sx_ts, sp_ts), (sx1, sp1) = s_ts, s1
            g_p = jax.tree_util.tree_map(
                lambda a, b: (jnp.tensordot(ct_ys, a, axes=((0, 1), (0, 1)))
                              + jnp.tensordot(ct_end, b, axes=1)), sp_ts, sp1)
            return jnp.einsum("ti,tij->j", ct_ys, sx_ts) + ct_end @ sx1, g_p
        g = jnp.einsum("ti,tij->j", ct_ys, s_ts) + ct_end @ s1
        n_x = self.parameters.n_x
        return g[:n_x], g[n_x:]

    # ------------------------------------------------------------------ batches of starts
    def states_of_lanes(self, mask, x0, p, arrays, outs_template, t0, t1, ts):
        """:meth:`states` of a batch of starts (lanes) solved as one system."""
        return solve_lanes(lambda t, x, a: self.field_p(t, x, *a), mask,
                           (x0, p, arrays, outs_template), (t0, t1, ts),
                           solver=self.lax_solver, adjoint=self.lax_loop,
                           options=self.options)

    def cotangents_of_lanes(self, mask, x0, p, arrays, outs_template, t0, t1, ts, ct_ys,
                            ct_end):
        """Cotangents of ``x0`` and ``p`` of a batch of starts, by reverse mode through
        their solve as one system."""
        import jax.numpy as jnp

        tree = self.parameters.tree
        # p as its arrays (not one sliced vector): the cotangents of the arrays
        # then need no pad-and-add into the whole vector at every stage
        p_tree = p if tree else jax.vmap(self.parameters.as_tree)(p)

        def f(x0, p_tree):
            saved, end, _ = solve_lanes(
                lambda t, x, a: self.field_p(t, x, *a, p_is_tree=True), mask,
                (x0, p_tree, arrays, outs_template), (t0, t1, ts),
                solver=self.reverse_solver, adjoint=self.reverse_adjoint,
                options=self.options)
            return saved, end

        g_x0, g_p = jax.vjp(f, x0, p_tree)[1]((ct_ys, ct_end))
        if not tree:
            g_p = jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in
                                   jax.tree_util.tree_leaves(g_p)], axis=1)
        return g_x0, g_p

    def no_sensitivities(self, out, args):
        """Lanes' ``(ys, y1, ok)`` as :meth:`with_sensitivities`' output, ``S`` never read
        (zeros, not batched): the gradient of lanes comes from
        :meth:`cotangents_of_lanes`."""
        import jax.numpy as jnp

        tree_map = jax.tree_util.tree_map
        ys, y1, ok = out
        n_t = args[6].shape[0]
        s_ts = tree_map(lambda a: jnp.zeros((n_t,) + a.shape, a.dtype), self.s0_template)
        s1 = tree_map(jnp.zeros_like, self.s0_template)
        batched = tree_map(lambda _: False, s_ts)
        return (((ys, s_ts), (y1, s1), ok),
                ((True, batched), (True, tree_map(lambda _: False, s1)), True))


def _last(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: a[-1], tree)
