"""Batches of starts (``jax.vmap`` over the native model's loss) solved as one ODE system.

A forward-sensitivity solve (:mod:`.forward_sensitivities`) under ``jax.vmap`` over
starts with common times stacks the starts' states into one system of *lanes* with one
step-size controller (:func:`solve_lanes`); its gradient then comes from reverse mode
through that solve.  Under a plain ``jax.vmap`` each lane keeps its own step size, but
XLA on CPU then copies the Runge-Kutta stage buffer of the whole batch at every stage
and selects over every loop variable.  Lanes with their own times (``t0``, ``t1``,
``ts`` batched: experiments) keep a plain ``jax.vmap``.

Arguments of the functions here follow the solve of one start: ``(x0, p, arrays,
outs_template, t0, t1, ts, ...)``; positions 4-6 are the times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from .options import JaxOptions
from .solvers import save_at, step_controller, succeeded
from .stage_sums import diffeqsolve

TIMES = slice(4, 7)
"""Positions of ``(t0, t1, ts)`` among the arguments of one start's solve."""


def vmap_as_lanes(one: Callable[..., Any], solve_lanes: Callable[..., Any], *,
                  always: tuple[int, ...] = (0,), keep: int | None = None,
                  finish: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``one(x0, p, arrays, outs_template, t0, t1, ts, ...)`` (one start), whose batching
    rule (``jax.vmap`` over starts) solves all lanes as one system:
    ``solve_lanes(mask, *args[:keep])``, ``mask[i]``: argument ``i`` has a leading lane
    axis (``always``: these always do).  ``finish(out, args)`` turns the lanes' output
    into ``(output of one, batched flags)``.  Lanes with their own times (``t0``, ``t1``,
    ``ts`` batched, e.g. experiments) are a plain ``jax.vmap`` of ``one`` (each lane its
    own steps)."""
    from jax.custom_batching import custom_vmap

    lanes = _Lanes(solve_lanes, always)
    fn = custom_vmap(one)

    @fn.def_vmap
    def rule(axis_size, in_batched, *args):
        if any(_batched(b) for b in in_batched[TIMES]):
            return _plain_vmap(one, in_batched, args)
        out = lanes.batch(None, axis_size, in_batched[:keep], args[:keep])
        if finish is not None:
            return finish(out, args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return fn


def _batched(flags: Any) -> bool:
    return any(jax.tree_util.tree_leaves(flags))


def _plain_vmap(fn: Callable[..., Any], in_batched: Any, args: Any) -> Any:
    axes = tuple(jax.tree_util.tree_map(lambda b: 0 if b else None, b) for b in in_batched)
    out = jax.vmap(fn, in_axes=axes)(*args)
    return out, jax.tree_util.tree_map(lambda _: True, out)


class _Lanes:
    """``solve_lanes`` (see :func:`vmap_as_lanes`) and its jitted form per ``mask``.

    Each mask's function is a ``jax.jit`` made once, so JAX traces the lanes' solve once
    for all calls of the same shapes (the periods of a plan, and the second trace JAX
    makes of a batched ``custom_vjp``'s backward pass), not once per call: tracing a
    reverse-mode solve takes seconds.  XLA inlines the call; the computation is the same.
    """

    def __init__(self, solve_lanes: Callable[..., Any], always: tuple[int, ...]):
        self.solve_lanes = solve_lanes
        self.always = always
        self.jitted: dict[tuple[bool, ...], Callable[..., Any]] = {}

    def batch(self, mask: tuple[bool, ...] | None, axis_size: int, in_batched: Any,
              args: Any) -> Any:
        """Batch axis (``axis_size``) and lane axis (``args[i]`` has one where
        ``mask[i]``; ``mask`` None: one lane) merged into one lane axis, index
        ``batch * lanes + lane``; returns the lanes' output with the batch axis first."""
        import jax.numpy as jnp

        tree_map, leaves = jax.tree_util.tree_map, jax.tree_util.tree_leaves
        if mask is None:
            mask, lanes = (False,) * len(args), 1
        else:
            lanes = next(leaf.shape[1] if b else leaf.shape[0]
                         for arg, bs, m in zip(args, in_batched, mask) if m
                         for leaf, b in zip(leaves(arg), leaves(bs)))
        total = axis_size * lanes

        def merge(leaf, b, m):
            if b and m:
                return leaf.reshape((total,) + leaf.shape[2:])
            if b:      # a batch axis, no lane axis
                return jnp.repeat(leaf, lanes, axis=0) if lanes > 1 else leaf
            if m:      # a lane axis, no batch axis
                return jnp.tile(leaf, (axis_size,) + (1,) * (leaf.ndim - 1))
            return jnp.broadcast_to(leaf, (total,) + leaf.shape)

        merged, new_mask = [], []
        for i, (arg, bs, m) in enumerate(zip(args, in_batched, mask)):
            if TIMES.start <= i < TIMES.stop or not (_batched(bs) or m or i in self.always):
                merged.append(arg)
                new_mask.append(False)
            else:
                merged.append(tree_map(lambda leaf, b, m=m: merge(leaf, b, m), arg, bs))
                new_mask.append(True)
        out = self._solve(tuple(new_mask))(*merged)
        if lanes == 1 and not any(mask):
            return out
        return tree_map(lambda leaf: leaf.reshape((axis_size, lanes) + leaf.shape[1:]), out)

    def _solve(self, mask: tuple[bool, ...]) -> Callable[..., Any]:
        """``solve_lanes`` for one ``mask``, jitted, batching into more lanes under a
        further vmap."""
        if mask not in self.jitted:
            from jax.custom_batching import custom_vmap

            impl = functools.partial(self.solve_lanes, mask)
            fn = custom_vmap(impl)

            @fn.def_vmap
            def rule(axis_size, in_batched, *args):
                if any(_batched(b) for b in in_batched[TIMES]):
                    return _plain_vmap(impl, in_batched, args)
                out = self.batch(mask, axis_size, in_batched, args)
                return out, jax.tree_util.tree_map(lambda _: True, out)

            self.jitted[mask] = jax.jit(fn)
        return self.jitted[mask]


def solve_lanes(term_one: Callable[..., Any], mask: tuple[bool, ...], lane_args: tuple,
                times: tuple, *, solver: Any, adjoint: Any, options: JaxOptions
                ) -> tuple[Any, Any, Any]:
    """A batch of starts solved as one ODE system of stacked states (lanes).

    ``term_one(t, x, (p, arrays, outs_template))`` is one lane's right-hand side;
    ``lane_args = (x0, p, arrays, outs_template)`` with a leading lane axis where
    ``mask`` (``x0`` always); ``times = (t0, t1, ts)`` common to all lanes.  Returns
    ``(x at ts, x at t1, ok)`` per lane (lane axis first).

    One step-size controller serves all lanes: its error norm is the largest of the
    lanes' own RMS norms (each the norm an unbatched solve uses), so every lane's local
    error stays within ``rtol``/``atol``; lanes differ from their unbatched solves within
    the solver's tolerance, not bit for bit.  A lane whose error is not finite (its
    solution blew up) no longer steers the steps; it is reported not ``ok``.
    """
    import diffrax
    import jax.numpy as jnp

    axes = tuple(0 if m else None for m in mask[:4])
    x0, p, arrays, outs_template = lane_args
    lanes = x0.shape[0]

    def field(t, x, a):
        return jax.vmap(lambda x_, *a_: term_one(t, x_, a_), in_axes=(0,) + axes[1:],
                        axis_size=lanes)(x, *a)

    def lane_norm(tree):
        parts = jax.tree_util.tree_leaves(tree)
        squares = sum(jnp.sum(jnp.reshape(v, (lanes, -1)) ** 2, axis=1) for v in parts)
        rms = jnp.sqrt(squares / sum(v[0].size for v in parts))
        return jnp.max(jnp.where(jnp.isfinite(rms), rms, 0.0))

    controller = step_controller(options, norm=lane_norm)
    t0, t1, ts = times
    sol = diffeqsolve(
        diffrax.ODETerm(field), solver, t0, t1, None, x0, (p, arrays, outs_template),
        saveat=save_at(ts), stepsize_controller=controller, max_steps=options.max_steps,
        adjoint=adjoint, throw=False)
    saved = jnp.moveaxis(sol.ys[0], 0, 1)
    end = sol.ys[1][-1]
    finite = jnp.all(jnp.isfinite(saved), axis=(1, 2)) & jnp.all(jnp.isfinite(end), axis=1)
    return saved, end, succeeded(sol) & finite
