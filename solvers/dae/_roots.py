"""`Roots`: root functions ``g(t, y, y', args)`` located during a solve, as IDA's rootfinding
(``IDARootInit``, ``IDASetRootDirection``, ``IDA_ROOT_RETURN``).

After each accepted step the stepper evaluates ``g`` at the step's end (`check_step`); where a
component changed sign since the last check (in the direction asked for), the root is refined
on the step's BDF interpolating polynomial by IDA's ``IDARootfind``: the Illinois variant of the
secant method, to ``ttol = 100 eps (|t_n| + |h|)``. The rest of the step is then searched
again from the root, so several roots in one step are all found, nearest first. The search is
held out of derivatives; each recorded root time is then differentiated by the implicit
function theorem, ``dt* = -dg_i / (d g_i / dt)`` at the root along the interpolant, whose
``phi`` carries the states' sensitivities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._bdf import interpolate_both

__all__ = ["Found", "RootState", "Roots", "check_step", "start"]

sg = jax.lax.stop_gradient


@dataclass(frozen=True)
class Roots:
    """Root functions for `pdesolve(..., roots=Roots(g))`, as IDA's ``IDARootInit``.

    Attributes:
        g: ``g(t, y, yp, args) -> (m,)`` array, traceable by JAX; a root is a sign change of a
            component over a step.
        direction: ``None`` (roots where a component rises or falls), or one of ``+1`` (rising
            only: ``g_i`` goes from negative to positive), ``-1`` (falling only) or ``0``
            (both) per component, as ``IDASetRootDirection``. Stored as a tuple.
        terminal: whether a root ends the solve there (``Status.ROOT``): a bool for all
            components or one per component. Stored as a bool or a tuple.
        max_roots: how many roots `Solution.root_ts` holds; later ones are not recorded (a
            terminal one still ends the solve).

    Roots with equal fields (the same ``g`` object) share compiled solves.
    """

    g: Callable[..., Any]
    direction: Sequence[int] | None = None
    terminal: bool | Sequence[bool] = False
    max_roots: int = 64

    def __post_init__(self) -> None:
        if not callable(self.g):
            raise TypeError(f"Roots(g) needs a callable g(t, y, yp, args) -> (m,) array, got "
                            f"{type(self.g).__name__}")
        if self.direction is not None:
            d = np.asarray(self.direction)
            if d.ndim != 1 or d.size == 0 or not np.all(np.isin(d, (-1, 0, 1))):
                raise ValueError(f"Roots(direction=...) takes None or one of +1 (rising), -1 "
                                 f"(falling), 0 (both) per component of g, got "
                                 f"{self.direction!r}")
            object.__setattr__(self, "direction", tuple(int(v) for v in d))
        if isinstance(self.terminal, (bool, np.bool_)):
            object.__setattr__(self, "terminal", bool(self.terminal))
        else:
            t = np.asarray(self.terminal)
            if t.ndim != 1 or t.size == 0 or t.dtype != bool:
                raise ValueError(f"Roots(terminal=...) takes a bool or one bool per component "
                                 f"of g, got {self.terminal!r}")
            object.__setattr__(self, "terminal", tuple(bool(v) for v in t))
        if not (isinstance(self.max_roots, int) and not isinstance(self.max_roots, bool)
                and self.max_roots >= 1):
            raise ValueError(f"Roots(max_roots=...) must be a positive int, got "
                             f"{self.max_roots!r}")

    def evaluate(self, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any) -> jax.Array:
        """``g`` at ``(t, y, y')`` as a 1-D array of ``y``'s dtype (checked against the
        per-component settings)."""
        out = jnp.asarray(self.g(t, y, yp, args))
        if out.ndim != 1 or out.shape[0] == 0:
            raise ValueError(f"Roots g returned shape {out.shape}; it must return a non-empty "
                             f"1-D array, one entry per root function")
        m = out.shape[0]
        for name, value in (("direction", self.direction), ("terminal", self.terminal)):
            if isinstance(value, tuple) and len(value) != m:
                raise ValueError(f"Roots({name}=...) has {len(value)} entries but g returns "
                                 f"{m}; give one per component of g")
        return out.astype(y.dtype)

    def directions(self, m: int) -> np.ndarray:
        return np.zeros(m) if self.direction is None else np.asarray(self.direction, float)

    def terminals(self, m: int) -> np.ndarray:
        if isinstance(self.terminal, tuple):
            return np.asarray(self.terminal, bool)
        return np.full(m, self.terminal, bool)


class RootState(NamedTuple):
    """The rootfinding state carried by the stepping loop."""

    tlo: jax.Array          # the last time g was checked (IDA's tlo)
    glo: jax.Array          # g there (m,)
    active: jax.Array       # (m,) components checked (IDA's gactive)
    n_found: jax.Array      # roots found so far (may exceed max_roots)
    root_ts: jax.Array      # (max_roots,) NaN-padded
    root_index: jax.Array   # (max_roots,) int32, -1-padded


class Found(NamedTuple):
    state: RootState
    terminal: jax.Array     # a terminal root was found in this step
    t_root: jax.Array       # where (the step's end when none)


def start(roots: Roots, t0: jax.Array, y0: jax.Array, yp0: jax.Array, args: Any) -> RootState:
    """IDARcheck1: ``g`` at ``t0``; components exactly 0 there are left out until they are not
    (IDA also looks a rounding step past ``t0``; here they wait for the first step's end)."""
    g0 = roots.evaluate(t0, sg(y0), sg(yp0), sg(args))
    R = roots.max_roots
    return RootState(tlo=t0, glo=g0, active=g0 != 0, n_found=jnp.zeros((), jnp.int32),
                     root_ts=jnp.full((R,), jnp.nan, t0.dtype),
                     root_index=jnp.full((R,), -1, jnp.int32))


def _different_sign(a, b):
    return ((a < 0) & (b > 0)) | ((a > 0) & (b < 0))


def _scan(active, rootdir, glo, g):
    """Which components change sign from ``glo`` to ``g`` (in the wanted direction), the one
    with the largest ``|g / (g - glo)|``, and whether one is exactly 0."""
    wanted = active & (rootdir * glo <= 0)
    zero = g == 0
    change = wanted & ~zero & _different_sign(glo, g)
    frac = jnp.where(change, jnp.abs(g / jnp.where(change, g - glo, 1.0)), 0.0)
    return jnp.any(change), jnp.argmax(frac), jnp.any(wanted & zero)


def _rootfind(gfun, active, rootdir, tlo, glo, thi, ghi, ttol):
    """IDARootfind on ``(tlo, thi]``: ``(found, trout, grout, iroots)`` with ``iroots`` the
    components that have a root at ``trout``."""
    sgnchg, imax, zroot = _scan(active, rootdir, glo, ghi)

    def go_on(c):
        tlo, _glo, thi, _ghi, _imax, _side, _sideprev, _alph, done, it = c
        return ~done & (jnp.abs(thi - tlo) > ttol) & (it < 200)

    def refine(c):
        tlo, glo, thi, ghi, imax, side, sideprev, alph, _done, it = c
        alph = jnp.where(sideprev == side, jnp.where(side == 2, 2.0 * alph, 0.5 * alph), 1.0)
        width = thi - tlo
        tmid = thi - width * ghi[imax] / (ghi[imax] - alph * glo[imax])
        fracint = jnp.abs(width) / ttol
        fracsub = jnp.where(fracint > 5.0, 0.1, 0.5 / fracint)
        tmid = jnp.where(jnp.abs(tmid - tlo) < 0.5 * ttol, tlo + fracsub * width, tmid)
        tmid = jnp.where(jnp.abs(thi - tmid) < 0.5 * ttol, thi - fracsub * width, tmid)
        gmid = gfun(tmid)
        chg, imid, zmid = _scan(active, rootdir, glo, gmid)
        low = chg | zmid     # the root is in (tlo, tmid]: tmid becomes thi
        thi2 = jnp.where(low, tmid, thi)
        tlo2 = jnp.where(low, tlo, tmid)
        done = ~chg & zmid
        side2 = jnp.where(chg, 1, jnp.where(zmid, side, 2))
        return (tlo2, jnp.where(low, glo, gmid), thi2, jnp.where(low, gmid, ghi),
                jnp.where(chg, imid, imax), side2, side, alph, done, it + 1)

    carry = (tlo, glo, thi, ghi, imax, jnp.zeros((), jnp.int32), -jnp.ones((), jnp.int32),
             jnp.ones_like(tlo), ~sgnchg, jnp.zeros((), jnp.int32))
    tlo, glo, thi, ghi, *_ = jax.lax.while_loop(go_on, refine, carry)
    wanted = active & (rootdir * glo <= 0)
    iroots = wanted & ((ghi == 0) | _different_sign(glo, ghi))
    return sgnchg | zroot, thi, ghi, iroots


def check_step(roots: Roots, K: int, rs: RootState, args: Any, tn: jax.Array, h: jax.Array,
               psi: jax.Array, phi: tuple, k: jax.Array, eps: Any) -> Found:
    """IDARcheck3 after an accepted step ending at ``tn`` (``psi``, ``phi``, order ``k``: its
    interpolant): find and record the roots in ``(tlo, tn]``, nearest first."""
    # with their tangents, for the roots' derivatives: the states' sensitivities, and those of
    # the step (whose size is not wholly held out of derivatives: the order selection's
    # estimate at k + 1 reads phi), as the save times' interpolation sees them
    args_d, psi_d, phi_d, tn_d = args, psi, phi, tn
    args, psi, phi, tn, h = sg((args, psi, phi, tn, h))
    m = rs.glo.shape[0]
    rootdir = jnp.asarray(roots.directions(m), rs.glo.dtype)
    term = jnp.asarray(roots.terminals(m))
    R = roots.max_roots

    def gfun(t):
        y, yp = interpolate_both(K, t, tn, psi, phi, k)
        return roots.evaluate(t, y, yp, args)

    def root_times(trout, hit):
        """``trout`` for each component with a root there, as ``t* - (G - sg(G)) / G'``: the
        value is ``t*``, the derivative ``-dG / G'`` (``G = g_i`` through ``phi``, ``args``)."""
        y, yp = interpolate_both(K, trout, tn_d, psi_d, phi_d, k)
        G = roots.evaluate(trout, y, yp, args_d)
        _, slope = jax.jvp(gfun, (trout,), (jnp.ones_like(trout),))
        ok = hit & (slope != 0) & jnp.isfinite(slope)
        return jnp.where(ok, trout - (G - sg(G)) / jnp.where(ok, slope, 1.0), trout)

    g_end = gfun(tn)
    ttol = (jnp.abs(tn) + jnp.abs(h)) * eps * 100.0

    def searching(c):
        _rs, stop, _t_root, more, passes = c
        return more & ~stop & (passes < m)

    def one_pass(c):
        rs, _stop, t_root, _more, passes = c
        found, trout, grout, iroots = _rootfind(gfun, rs.active, rootdir, rs.tlo, rs.glo, tn,
                                                g_end, ttol)
        hit = found & iroots
        # slot r takes the component whose root is the r-th found (past max_roots: none)
        pos = jnp.where(hit, rs.n_found + jnp.cumsum(hit) - 1, R)
        into = pos[None, :] == jnp.arange(R)[:, None]           # (R, m)
        filled = jnp.any(into, axis=1)
        times = jnp.sum(jnp.where(into, root_times(trout, hit)[None, :], 0.0), axis=1)
        root_ts = jnp.where(filled, times, rs.root_ts)
        which = jnp.sum(jnp.where(into, jnp.arange(m, dtype=jnp.int32)[None, :], 0), axis=1)
        root_index = jnp.where(filled, which, rs.root_index).astype(jnp.int32)
        # IDA's gactive: a component exactly 0 at a root is left out until it is not (IDA
        # looks a rounding step past the root instead, IDARcheck2).
        active = jnp.where(grout != 0, True, jnp.where(found, False, rs.active))
        term_hit = jnp.any(hit & term)
        new = RootState(trout, grout, active, rs.n_found + jnp.sum(hit).astype(jnp.int32),
                        root_ts, root_index)
        return (new, term_hit, jnp.where(term_hit, trout, t_root), found & (trout < tn),
                passes + 1)

    carry = (rs, jnp.asarray(False), tn, jnp.asarray(True), jnp.zeros((), jnp.int32))
    rs, stop, t_root, _more, _passes = jax.lax.while_loop(searching, one_pass, carry)
    # The next step is searched from tn (IDA's tlo = trout is tn when no root is left here).
    rs = rs._replace(tlo=jnp.where(stop, rs.tlo, tn), glo=jnp.where(stop, rs.glo, g_end))
    return Found(rs, stop, t_root)
