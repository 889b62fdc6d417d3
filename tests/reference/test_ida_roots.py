"""`pdesolve(roots=Roots(...))` against SUNDIALS IDA's rootfinding in idaRoberts_dns.

idaRoberts_dns (see ida_examples.py) calls IDARootInit with ``grob``, ``g = (y1 - 1e-4,
y3 - 0.01)``, and prints two root returns (data/ida/idaRoberts_dns.out): y3 - 0.01 rising at
t = 2.6402e-01 (found in step 27) and y1 - 1e-4 falling at t = 2.0788e+07.

- The first root, its printed state and its step agree with IDA's to the printed digits.
- The second root's fourth digit is a rounding branch, in IDA itself: run by IDA (SUNDIALS'
  library through scikit-sundae's wheel), the residual as idaRoberts_dns.c rounds it,
  ``(3e7 y2) y2``, gives the printed 2.0788e+07 in 362 steps and 537 Newton iterations; rounded
  as ``3e7 (y2 y2)`` it gives 2.0801e+07 in 375 steps and 529. A Newton convergence test near
  step 231 (t = 1.46e6) passes on one and fails by 0.07 % on the other; past it the step sizes
  differ and the solutions agree to the tolerances only. JIDA takes the same two branches (the
  same roots to 1e-7, the same Newton iterations), from the other rounding each: its Jacobian is
  JAX's, IDA's the example's ``jacrob``. On the branch of the printed output, every printed row
  up to 4e9 and both roots are IDA's to the printed digits.
- Neither printed digit set is the exact root's: scipy's Radau at rtol 1e-11 on the reduced ODE
  puts y1 = 1e-4 at t = 2.07955e+07 (2.6402e-01 for the first). IDA's 2.0788e+07 is 3.6e-4 below
  it, 2.0801e+07 2.6e-4 above: at IDA's tolerances (rtol 1e-4) the fourth digit of this root is
  the solver's global error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ida_examples import (
    FSA_P,
    FSA_Y0,
    ROBERTS_ATOL,
    ROBERTS_RTOL,
    ROBERTS_Y0,
    ROBERTS_YP0,
    fsa_problem,
    roberts_output,
    roberts_problem,
    roberts_roots,
)

import solvers as ds
from solvers.dae import JIDA, Roots, SaveAt, Status, pdesolve

jax.config.update("jax_enable_x64", True)

TS = 0.4 * 10.0 ** np.arange(12)     # IDA's outputs, 0.4 ... 4e10
SOLVER = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL), initialize=False)


def grob(t, y, yp, args):
    """``grob`` of idaRoberts_dns.c."""
    return jnp.stack([y[0] - 1.0e-4, y[2] - 0.01])


def _roberts(roots=None, ts=TS, solver=SOLVER, squared_first=False):
    return pdesolve(roberts_problem(squared_first), solver, (0.0, 4e10), ROBERTS_Y0,
                    ROBERTS_YP0, saveat=SaveAt(ts=ts), roots=roots)


def _state_at(t):
    """JIDA's state at ``t`` (the same steps: a save time does not change them)."""
    return np.asarray(_roberts(ts=np.array([t])).ys[0])


def test_the_printed_roots_are_idas():
    (t_a, *y_a, nst_a, found_a), (t_b, *y_b, _, found_b) = roberts_roots()
    assert (t_a, found_a, t_b, found_b) == (2.6402e-01, (0, 1), 2.0788e07, (-1, 0))
    sol = _roberts(Roots(grob, max_roots=4))
    assert sol.status is Status.SUCCESS and sol.success
    roots, index = np.asarray(sol.root_ts), np.asarray(sol.root_index)
    assert list(index) == [1, 0, -1, -1]          # y3 - 0.01 first, then y1 - 1e-4
    assert np.isnan(roots[2:]).all()
    assert f"{roots[0]:.4e}" == "2.6402e-01"
    assert abs(roots[1] / t_b - 1.0) < 1e-3       # the other branch (2.0801e+07), see below
    for t, y_ida in ((roots[0], y_a), (roots[1], y_b)):
        assert [f"{v:.4e}" for v in _state_at(t)] == [f"{v:.4e}" for v in y_ida], t
    # on the root to the rootfinding's tolerance (100 eps (|t| + |h|) in t)
    assert abs(_state_at(roots[0])[2] - 0.01) < 1e-12
    assert abs(_state_at(roots[1])[0] - 1e-4) < 1e-12
    # the saved states are those of the solve without roots (rootfinding does not step)
    assert np.array_equal(np.asarray(sol.ys), np.asarray(_roberts().ys))
    # IDA finds the first root in its step 27: so does JIDA (not in step 26)
    short = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                 initialize=False, max_steps=nst_a)
    assert f"{float(_roberts(Roots(grob), solver=short).root_ts[0]):.4e}" == "2.6402e-01"
    shorter = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                   initialize=False, max_steps=nst_a - 1)
    assert np.isnan(np.asarray(_roberts(Roots(grob), solver=shorter).root_ts)).all()


def _printed_rows():
    """IDA's printed rows at the output times TS (not its root returns)."""
    rows = [r for r in roberts_output() if np.isclose(TS, r[0], rtol=1e-12, atol=0).any()]
    assert [r[0] for r in rows] == pytest.approx(TS, rel=1e-12)
    return rows


def _ida(squared_first):
    """idaRoberts_dns run by SUNDIALS IDA itself: its residual (either rounding of 3e7 y2^2),
    its ``jacrob``, its tolerances, ``grob``; IDA's dense solver. Returns (roots, outputs at TS,
    residual evaluations: one per Newton iteration with a user Jacobian)."""
    from sksundae.ida import IDA

    def resrob(t, y, yp, res):
        quad = 3.0e7 * (y[1] * y[1]) if squared_first else 3.0e7 * y[1] * y[1]
        r0 = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
        res[0] = r0 - yp[0]
        res[1] = -r0 - quad - yp[1]
        res[2] = y[0] + y[1] + y[2] - 1.0

    def jacrob(t, y, yp, res, cj, jj):
        jj[:, 0] = (-0.04 - cj, 0.04, 1.0)
        jj[:, 1] = (1.0e4 * y[2], -1.0e4 * y[2] - 6.0e7 * y[1] - cj, 1.0)
        jj[:, 2] = (1.0e4 * y[1], -1.0e4 * y[1], 1.0)

    def g(t, y, yp, events):
        events[0], events[1] = y[0] - 1.0e-4, y[2] - 0.01

    g.terminal = [False, False]
    ida = IDA(resrob, rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL), linsolver="dense",
              jacfn=jacrob, eventsfn=g, num_events=2, algebraic_idx=[2], max_num_steps=10_000)
    out = ida.solve(np.concatenate([[0.0], TS]), ROBERTS_Y0, ROBERTS_YP0)
    assert out.success, out.message
    assert [list(i) for i in out.i_events] == [[0, 1], [-1, 0]]
    return np.asarray(out.t_events), np.asarray(out.y)[1:], int(out.nfev)


def _jida(squared_first):
    sol = _roberts(Roots(grob, max_roots=2), squared_first=squared_first)
    assert sol.status is Status.SUCCESS, sol.message
    return (np.asarray(sol.root_ts), np.asarray(sol.ys), int(sol.stats["newton_iterations"]),
            int(sol.stats["steps"]))


def test_idas_two_roundings_give_two_second_roots_and_jida_takes_both():
    ida = {sq: _ida(sq) for sq in (False, True)}
    # IDA with idaRoberts_dns.c's rounding is its published output (the roots, and every row
    # but 4e10, which the example interpolates from a step past it: here IDA stops there)
    roots, ys, nre = ida[False]
    assert [f"{t:.4e}" for t in roots] == ["2.6402e-01", "2.0788e+07"]
    assert nre == 537                               # the .out's nre and nni
    for (t, *y_ida, _, _, _), y in list(zip(_printed_rows(), ys))[:-1]:
        assert [f"{v:.4e}" for v in y] == [f"{v:.4e}" for v in y_ida], t
    # the other rounding: the other branch
    assert f"{ida[True][0][1]:.4e}" == "2.0801e+07" and ida[True][2] == 529
    # JIDA's two roundings take IDA's two branches: the same roots and Newton iterations
    ida_branches = sorted((r[1], n) for r, _, n in ida.values())
    jida_branches = sorted((r[1], n) for r, _, n, _ in map(_jida, (False, True)))
    assert [n for _, n in jida_branches] == [n for _, n in ida_branches] == [537, 529]
    for (ours, _), (theirs, _) in zip(jida_branches, ida_branches):
        assert abs(ours / theirs - 1) < 1e-7, (ours, theirs)


def test_on_the_printed_branch_every_row_and_both_roots_are_idas():
    (t_a, *_), (t_b, *_) = roberts_roots()
    rows = _printed_rows()
    printed = [r for r in map(_jida, (False, True)) if f"{r[0][1]:.4e}" == f"{t_b:.4e}"]
    assert len(printed) == 1                        # one of the two roundings
    (roots, ys, nni, nst), = printed
    assert rows[-1][4] == 362                       # IDA's nst at 4e10
    assert (f"{roots[0]:.4e}", nni, nst) == (f"{t_a:.4e}", 537, 362)
    for (t, *y_ida, _, _, _), y in list(zip(rows, ys))[:-1]:  # 4e10: see above
        assert [f"{v:.4e}" for v in y] == [f"{v:.4e}" for v in y_ida], t


def _exact_roots():
    """Both roots of the reduced ODE (y3 = 1 - y1 - y2), by scipy's Radau at rtol 1e-11."""
    from scipy.integrate import solve_ivp

    def f(t, y):
        y1, y2 = y
        return [-0.04 * y1 + 1e4 * y2 * (1 - y1 - y2),
                0.04 * y1 - 1e4 * y2 * (1 - y1 - y2) - 3e7 * y2 * y2]

    def y3_rises(t, y):
        return 1 - y[0] - y[1] - 0.01

    def y1_falls(t, y):
        return y[0] - 1e-4

    sol = solve_ivp(f, (0.0, 4e10), [1.0, 0.0], method="Radau", rtol=1e-11,
                    atol=[1e-20, 1e-24], events=[y3_rises, y1_falls])
    assert sol.success, sol.message
    return float(sol.t_events[0][0]), float(sol.t_events[1][0])


def test_the_second_root_is_no_farther_from_the_exact_one_than_idas():
    exact_a, exact_b = _exact_roots()
    (t_a, *_), (t_b, *_) = roberts_roots()
    roots = np.asarray(_roberts(Roots(grob, max_roots=2)).root_ts)
    assert f"{exact_a:.4e}" == f"{roots[0]:.4e}" == f"{t_a:.4e}"
    ours, idas = abs(roots[1] / exact_b - 1), abs(t_b / exact_b - 1)
    assert 1e-5 < idas < 1e-3, (exact_b, t_b)    # IDA's own fourth digit is its global error
    assert ours <= idas, (roots[1], t_b, exact_b)


def test_a_terminal_root_ends_the_solve_there():
    ts = np.array([0.05, 0.1, 0.2, 0.4, 4.0])
    sol = _roberts(Roots(grob, terminal=True, max_roots=3), ts=ts)
    assert sol.status is Status.ROOT and sol.success
    assert f"{float(sol.root_ts[0]):.4e}" == "2.6402e-01"
    assert list(np.asarray(sol.root_index)) == [1, -1, -1]
    ys, free = np.asarray(sol.ys), np.asarray(_roberts(ts=ts).ys)
    assert np.array_equal(ys[:3], free[:3])       # before the root: as without roots
    assert np.isnan(ys[3:]).all()                 # after it: not reached
    # terminal for y1 - 1e-4 only: goes past the first root, ends at the second
    second = _roberts(Roots(grob, terminal=[True, False]), ts=ts)
    assert second.status is Status.ROOT
    assert list(np.asarray(second.root_index)[:3]) == [1, 0, -1]
    assert np.array_equal(np.asarray(second.ys), free)


def test_direction_selects_the_crossings():
    def index(direction):
        return list(np.asarray(_roberts(Roots(grob, direction=direction, max_roots=3))
                               .root_index))

    assert index([-1, 1]) == index(None) == index([0, 0]) == [1, 0, -1]
    assert index([1, 0]) == [1, -1, -1]           # y1 - 1e-4 falls: not a rising root
    assert index([0, -1]) == [0, -1, -1]          # y3 - 0.01 rises: not a falling root
    assert index([1, -1]) == [-1, -1, -1]


def test_max_roots_pads_and_truncates():
    one = _roberts(Roots(grob, max_roots=1))
    assert one.root_ts.shape == (1,) and list(np.asarray(one.root_index)) == [1]
    many = _roberts(Roots(grob, max_roots=5))
    assert many.root_ts.shape == (5,) and many.root_index.dtype == jnp.int32
    assert np.isnan(np.asarray(many.root_ts)[2:]).all()
    assert list(np.asarray(many.root_index)) == [1, 0, -1, -1, -1]
    assert float(one.root_ts[0]) == float(many.root_ts[0])
    none = _roberts()
    assert none.root_ts.shape == (0,) and none.root_index.shape == (0,)


def test_roots_under_jit_and_from_the_top_level_package():
    assert ds.Roots is Roots
    roots = Roots(grob, max_roots=2)

    @jax.jit
    def solve(y0):
        return pdesolve(roberts_problem(), SOLVER, (0.0, 4e10), y0, ROBERTS_YP0,
                        saveat=SaveAt(ts=TS), roots=roots)

    sol = solve(jnp.asarray(ROBERTS_Y0))
    assert int(sol.code) == Status.SUCCESS.code
    assert np.array_equal(np.asarray(sol.root_ts), np.asarray(_roberts(roots).root_ts))


def test_settings_are_checked():
    with pytest.raises(ValueError, match="direction"):
        Roots(grob, direction=[2, 0])
    with pytest.raises(ValueError, match="max_roots"):
        Roots(grob, max_roots=0)
    with pytest.raises(ValueError, match="one per component"):
        _roberts(Roots(grob, direction=[1, 0, 0]))


# --- derivatives before a terminal root -------------------------------------------------------

FSA_TS = np.array([0.05, 0.1, 0.2, 0.4, 4.0, 40.0, 400.0])
TIGHT = JIDA(linear="dense", rtol=1e-10, atol=1e-14)


def g_fsa(t, y, yp, p):
    return jnp.stack([y[2] - 0.01, y[0] - 0.5])


def _fsa(p, solver=TIGHT):
    """idasRoberts_FSA_dns's parametrized residual, consistent y'0; roots y3 = 0.01 (t = 0.264)
    and y1 = 0.5 (t = 268, terminal)."""
    return pdesolve(fsa_problem(), solver, (0.0, 4e10), FSA_Y0, saveat=SaveAt(ts=FSA_TS),
                    args=p, roots=Roots(g_fsa, terminal=[False, True], max_roots=3))


def _quantity(p):
    sol = _fsa(p)
    ys = sol.ys   # rows before the terminal root, and both root times
    return ys[1, 0] + 10.0 * ys[2, 1] + ys[5, 2] + sol.root_ts[0] + 1e-3 * sol.root_ts[1]


def test_gradients_before_a_terminal_root_match_finite_differences():
    p = jnp.asarray(FSA_P)
    sol = _fsa(p)
    assert sol.status is Status.ROOT
    assert list(np.asarray(sol.root_index)) == [0, 1, -1]
    assert 0.2 < float(sol.root_ts[0]) < 0.4 and 40.0 < float(sol.root_ts[1]) < 400.0
    grad = np.asarray(jax.jit(jax.grad(_quantity))(p))
    assert np.all(np.isfinite(grad)), grad
    fd = []
    for i in range(3):
        step = 2e-4 * FSA_P[i]
        up, down = p.at[i].add(step), p.at[i].add(-step)
        fd.append((float(_quantity(up)) - float(_quantity(down))) / (2 * step))
    # p_i dQ / dp_i, each of order 0.1-1: the differences' noise is ~1e-8 of that
    np.testing.assert_allclose(grad * FSA_P, np.asarray(fd) * FSA_P, rtol=1e-5, atol=1e-8)
    # forward mode: the row after the root and the unused root slot have NaN derivatives
    jac_ys, jac_roots = jax.jacfwd(lambda p: (_fsa(p).ys, _fsa(p).root_ts))(p)
    jac_ys, jac_roots = np.asarray(jac_ys), np.asarray(jac_roots)
    assert np.all(np.isfinite(jac_ys[:6])) and np.all(np.isnan(jac_ys[6:]))
    assert np.all(np.isfinite(jac_roots[:2])) and np.all(np.isnan(jac_roots[2]))
    total = (jac_ys[1, 0] + 10.0 * jac_ys[2, 1] + jac_ys[5, 2] + jac_roots[0]
             + 1e-3 * jac_roots[1])
    # (another compiled program: its steps differ at rounding level, 1e-10 of t)
    np.testing.assert_allclose(total, grad, rtol=1e-6)
