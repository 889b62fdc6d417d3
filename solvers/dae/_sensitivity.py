"""Forward sensitivities in the local error test (IDAS's ``IDASetSensErrCon``):
``JIDA(sensitivity_error_control=True)``.

By default a solve's derivatives are those of its own steps (`jax.jacfwd` through the stepping
loop, step sizes held out): exact derivatives of the computed solution, but with errors the
error test never sees. With this option the derivative of a solve is computed instead by
solving the *augmented* DAE in ``Y = (y, S~_1, ..., S~_P)``, one block per scalar input ``e``
differentiated, with the residual

    F(t, y, y', p) = 0,    F_y S~_e + F_y' S~_e' + pbar_e F_p u_e = 0,

where ``S~_e = pbar_e dy/dp_e`` is the sensitivity scaled by the input's magnitude ``pbar_e =
|p_e|`` (1 where ``p_e`` is 0, and for the entries of ``y0`` and ``yp0``), as IDAS scales it
with ``pbar``; so the sensitivities share the state's absolute tolerances (IDAS's
``IDASensEEtolerances``: ``atol / |pbar_e|`` for ``dy/dp_e``). The blocks' residuals are JVPs of
``F``. Every block is in the error test and in the corrector's convergence test. The iteration
matrix is the augmented residual's own (coloured AD over the state's pattern in each diagonal
block and in each block's coupling to ``y``, block lower-triangular): with only the diagonal
blocks (IDAS's simultaneous corrector's approximation) the corrector failed to converge 34-225
times on idasRoberts_FSA_dns and took 1763-2084 steps; with the coupling, none and 1208 (IDAS,
staggered: 1235). The norm is the weighted RMS norm over
all blocks with the tolerances divided by ``sqrt(P + 1)``: the root-sum-square of the blocks'
norms, at least IDAS's largest one (``IDASensWrmsNormUpdate``), so each block passes IDAS's
test. The initial blocks are unit vectors for directions of ``y0`` (of ``yp0`` in ``S~'``), 0
otherwise; the consistent initialization makes them consistent as it does ``y``.

The values the derivative rule returns (the primal of `jax.jvp`, `jax.grad`'s forward pass)
come from the augmented solve: its steps are set by the sensitivities too, so they differ from
an undifferentiated solve within the tolerances. A quadrature is augmented the same way (its
JVPs along the blocks). Root functions are refused. The system's matrix is always
differentiated: a ``DAEProblem(jacobian=)`` serves the undifferentiated solve only.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..linear import Pattern
from ._context import Context, context
from ._problem import DAEProblem
from ._quadrature import Quadrature
from ._stepper import integrate

__all__ = ["augmented_sensitivities"]

sg = jax.lax.stop_gradient


@dataclasses.dataclass(frozen=True, eq=False)
class _Augmented:
    """The augmented problem of one base context, input structure and chosen leaves."""

    ctx: Context                 # the augmented problem's
    quad: Quadrature | None      # the augmented quadrature
    n: int                       # the base problem's unknowns
    sizes: tuple[int, ...]       # the scalar inputs of each chosen leaf
    kinds: tuple[str, ...]       # "args", "y0" or "yp0", per chosen leaf
    n_args: int                  # leaves of args, before y0 (and yp0)


_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[DAEProblem, dict[Any, _Augmented]] = \
    weakref.WeakKeyDictionary()


def _kind(i: int, n_args: int) -> str:
    return "args" if i < n_args else ("y0" if i == n_args else "yp0")


def _arg_directions(pbar: jax.Array, leaves: list[Any], chosen: tuple[int, ...],
                    sizes: tuple[int, ...], n_args: int) -> list[jax.Array]:
    """For each chosen args leaf, its ``(P,) + shape`` tangents: ``pbar_e`` at direction
    ``e``'s entry, 0 elsewhere (the directions of other leaves are 0 in every args leaf)."""
    P = sum(sizes)
    out, offset = [], 0
    for i, size in zip(chosen, sizes):
        if i < n_args:
            shape = jnp.shape(leaves[i])
            unit = np.zeros((P, size))
            unit[offset:offset + size] = np.eye(size)
            out.append((jnp.asarray(unit, pbar.dtype) * pbar[:, None]).reshape((P,) + shape))
        offset += size
    return out


def _build(ctx: Context, quad: Quadrature | None, treedef: Any, chosen: tuple[int, ...],
           shapes: tuple[tuple[int, ...], ...], n_args: int) -> _Augmented:
    base = ctx.problem
    n = base.pattern.n
    sizes = tuple(math.prod(shapes[i]) for i in chosen)
    kinds = tuple(_kind(i, n_args) for i in chosen)
    P = sum(sizes)
    blocks = P + 1
    arg_chosen = tuple(i for i in chosen if i < n_args)
    arg_tree = jax.tree.structure(jax.tree.unflatten(treedef, [0] * treedef.num_leaves)[0])

    def split(Y):
        return Y[:n], Y[n:].reshape(P, n)

    def along(fn, t, Y, Yp, aa):
        """``fn(t, y, y', args)`` and its JVPs along each block (``(P, ...)``)."""
        a, pbar = aa
        y, S = split(Y)
        yp, Sp = split(Yp)
        la = jax.tree.leaves(a)

        def f(yy, yyp, *sel):
            full = list(la)
            for i, x in zip(arg_chosen, sel):
                full[i] = x
            return fn(t, yy, yyp, jax.tree.unflatten(arg_tree, full))

        sel = [la[i] for i in arg_chosen]
        dirs = _arg_directions(pbar, la, chosen, sizes, n_args)
        value = f(y, yp, *sel)
        jvps = jax.vmap(lambda s, sp, *d: jax.jvp(f, (y, yp, *sel), (s, sp, *d))[1])(
            S, Sp, *dirs)
        return value, jvps

    def residual(t, Y, Yp, aa):
        value, jvps = along(ctx.residual, t, Y, Yp, aa)
        return jnp.concatenate([value, jvps.reshape(-1)])

    # The iteration matrix's pattern: the state's in each diagonal block and in each block's
    # coupling to y (F_y S_e and F_p depend on y only where F does), so the colouring
    # differentiates the whole augmented residual: an exact Newton matrix, block lower-triangular.
    p = base.pattern
    rows = [p.rows + b * n for b in range(blocks)] + [p.rows + b * n for b in range(1, blocks)]
    cols = [p.cols + b * n for b in range(blocks)] + [p.cols for _ in range(1, blocks)]
    pattern = Pattern.from_coo(np.concatenate(rows), np.concatenate(cols), n * blocks)
    problem = DAEProblem(residual, pattern, algebraic=np.tile(base.algebraic, blocks),
                         name=f"{base.name or 'problem'} with {P} sensitivities")
    s = ctx.solver
    shrink = 1.0 / math.sqrt(blocks)
    shrunk = tuple(v * shrink for v in s.atol_values)
    atol = shrunk * blocks if isinstance(s.atol, tuple) else shrunk[0]
    constraints = None if s.constraints is None else s.constraints + (0,) * (n * P)
    solver = dataclasses.replace(s, rtol=s.rtol * shrink, atol=atol, constraints=constraints,
                                 sensitivity_error_control=False)
    aug_quad = None
    if quad is not None:
        def q(t, Y, Yp, aa):
            value, jvps = along(quad.evaluate, t, Y, Yp, aa)
            return jnp.concatenate([value, jvps.reshape(-1)])

        qr = None if quad.rtol is None else quad.rtol * shrink
        qa: Any = quad.atol
        if isinstance(qa, tuple):
            qa = tuple(v * shrink for v in qa * blocks)
        elif qa is not None:
            qa = qa * shrink
        aug_quad = Quadrature(q, error_control=quad.error_control, rtol=qr, atol=qa)
    return _Augmented(context(problem, solver), aug_quad, n, sizes, kinds, n_args)


def _augmented(ctx: Context, quad: Quadrature | None, treedef: Any, chosen: tuple[int, ...],
               leaves: list[Any], n_args: int) -> _Augmented:
    shapes = tuple(tuple(jnp.shape(x)) for x in leaves)
    key = (ctx, quad, treedef, chosen, shapes)
    with _lock:
        found = _cache.get(ctx.problem, {}).get(key)
    if found is not None:
        return found
    made = _build(ctx, quad, treedef, chosen, shapes, n_args)
    with _lock:
        return _cache.setdefault(ctx.problem, {}).setdefault(key, made)


def augmented_sensitivities(ctx: Context, quad: Quadrature | None, treedef: Any,
                            chosen: tuple[int, ...], leaves: list[Any], t0: jax.Array,
                            t1: jax.Array, ts: jax.Array, tout1: jax.Array) -> Any:
    """`_pdesolve._sensitivities`'s results from the augmented solve: ``((d ys, d root_ts, d
    qs), out)``, each derivative a tuple over ``chosen`` shaped ``output + leaf``, ``out`` the
    augmented solve's outputs restricted to the state (and to the quadrature's own rows)."""
    args, y0, yp0 = jax.tree.unflatten(treedef, leaves)
    n_args = len(jax.tree.leaves(args))
    aug = _augmented(ctx, quad, treedef, chosen, leaves, n_args)
    n, dtype = aug.n, y0.dtype
    P = sum(aug.sizes)
    pbars, S0, Sp0 = [], [], []
    for i, size, kind in zip(chosen, aug.sizes, aug.kinds):
        if kind == "args":
            v = jnp.abs(sg(jnp.ravel(jnp.asarray(leaves[i], dtype))))
            pbars.append(jnp.where(v > 0, v, 1.0))
        else:
            pbars.append(jnp.ones((size,), dtype))
        unit = jnp.eye(n, dtype=dtype)
        zero = jnp.zeros((size, n), dtype)
        S0.append(unit if kind == "y0" else zero)
        Sp0.append(unit if kind == "yp0" else zero)
    pbar = jnp.concatenate(pbars)
    Y0 = jnp.concatenate([y0, jnp.concatenate(S0).reshape(-1)])
    Yp0 = None if yp0 is None else jnp.concatenate([yp0, jnp.concatenate(Sp0).reshape(-1)])
    ys, stats, code, root_ts, root_index, qs = integrate(
        aug.ctx, (args, pbar), Y0, Yp0, t0, t1, ts, tout1, None, aug.quad)
    m = ts.shape[0]
    S = ys[:, n:].reshape(m, P, n) / pbar[None, :, None]
    k = qs.shape[1] // (P + 1)
    dq = qs[:, k:].reshape(m, P, k) / pbar[None, :, None]
    jac_ys, jac_roots, jac_qs = [], [], []
    offset = 0
    for i, size in zip(chosen, aug.sizes):
        shape = tuple(jnp.shape(leaves[i]))
        part = slice(offset, offset + size)
        jac_ys.append(jnp.swapaxes(S[:, part], 1, 2).reshape((m, n) + shape))
        jac_qs.append(jnp.swapaxes(dq[:, part], 1, 2).reshape((m, k) + shape))
        jac_roots.append(jnp.zeros((0,) + shape, dtype))
        offset += size
    out = (ys[:, :n], stats, code, root_ts, root_index, qs[:, :k])
    return (tuple(jac_ys), tuple(jac_roots), tuple(jac_qs)), out
