"""A user Jacobian (``DAEProblem(jacobian=J)``, IDA's ``IDASetJacFn``) on SUNDIALS' examples,
which themselves pass one: ``jacrob`` of idaRoberts_dns.c and idasRoberts_FSA_dns.c (dense),
``jacHeat`` of idaHeat2D_klu.c (sparse, CSC). With them JIDA gives IDA's printed outputs and step
counts, the same solution as the differentiated matrix, and the same derivatives; a wrong J is
caught by ``check_jacobian``, a J of the wrong shape is refused before anything compiles.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ida_examples import (
    FSA_ATOL,
    FSA_P,
    FSA_Y0,
    FSA_YP0,
    HEAT_ATOL,
    MGRID,
    ROBERTS_ATOL,
    ROBERTS_RTOL,
    ROBERTS_Y0,
    ROBERTS_YP0,
    fsa_problem,
    heat_initial,
    heat_output,
    heat_problem,
    roberts_output,
    roberts_problem,
)

import solvers.dae as dae
from solvers.dae import JIDA, SaveAt, Status, pdesolve

jax.config.update("jax_enable_x64", True)

ROBERTS_TS = 0.4 * 10.0 ** np.arange(7)   # IDA's rows 0.4 ... 4e5


def jacrob(t, y, yp, c, args):
    """``jacrob`` of idaRoberts_dns.c: ``dF/dy + cj dF/dy'`` as a dense 3 x 3 array."""
    return jnp.array([[-0.04 - c, 1.0e4 * y[2], 1.0e4 * y[1]],
                      [0.04, -1.0e4 * y[2] - 6.0e7 * y[1] - c, -1.0e4 * y[1]],
                      [1.0, 1.0, 1.0]])


def jac_fsa(t, y, yp, c, p):
    """``Jac`` of idasRoberts_FSA_dns.c, with the parameters ``p``."""
    return jnp.array([[p[0] + c, -p[1] * y[2], -p[1] * y[1]],
                      [-p[0], p[1] * y[2] + 2.0 * p[2] * y[1] + c, p[1] * y[1]],
                      [1.0, 1.0, 1.0]])


def _with(problem, jacobian, **kw):
    return dataclasses.replace(problem, jacobian=jacobian, name=f"{problem.name} user J", **kw)


def _roberts(problem, initialize=False):
    solver = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                  initialize=initialize)
    yp0 = ROBERTS_YP0 if initialize is False else None
    return pdesolve(problem, solver, (0.0, 4e10), ROBERTS_Y0, yp0, saveat=SaveAt(ts=ROBERTS_TS))


@pytest.mark.parametrize("initialize", [False, "ya_ydp"])
def test_robertson_with_jacrob_gives_idas_rows_and_ads_solution(initialize):
    user = _roberts(_with(roberts_problem(), jacrob, check_jacobian=True), initialize)
    ad = _roberts(roberts_problem(), initialize)
    assert user.status is Status.SUCCESS and ad.status is Status.SUCCESS, user.message
    ida = {r[0]: r[1:4] for r in roberts_output()}
    for t, y in zip(ROBERTS_TS, np.asarray(user.ys)):
        assert [f"{v:.4e}" for v in y] == [f"{v:.4e}" for v in ida[t]], (t, y, ida[t])
    np.testing.assert_allclose(user.ys, ad.ys, rtol=1e-9, atol=1e-15)
    for name in ("steps", "newton_iterations", "factorizations"):
        a, u = int(ad.stats[name]), int(user.stats[name])
        assert abs(a - u) <= 0.01 * a, (name, a, u)


@pytest.mark.parametrize("example", ["robertson", "heat"])
def test_the_initializations_matrix_from_j_is_ads(example):
    # "ya_ydp" needs dF/dy on the algebraic columns and dF/dy' / h on the differential ones
    # (IDA's J(1 / h) whole would differ); "y" needs dF/dy. Both from J equal AD's.
    from solvers.dae._context import context
    from solvers.dae._initialize import _masks

    if example == "robertson":
        problem, jac, args = fsa_problem(), jac_fsa, jnp.asarray(FSA_P)
        y, yp = jnp.array([0.9, 2e-5, 0.1]), jnp.array([0.1, -0.2, 0.0])
    else:
        problem, jac, args = heat_problem(), jac_heat, None
        y, yp = (jnp.asarray(a) for a in heat_initial())
    user = context(_with(problem, jac), JIDA(linear="dense"))
    ad = context(problem, JIDA(linear="dense"))
    for mode in ("ya_ydp", "y"):
        cy, cyp, _ = _masks(ad, mode, 3e-4, y.dtype)
        a = np.asarray(ad.matrix_values(0.0, y, yp, args, cy, cyp))
        u = np.asarray(user.matrix_values(0.0, y, yp, args, cy, cyp))
        np.testing.assert_allclose(u, a, rtol=1e-12, atol=1e-12 * np.abs(a).max())


def test_robertson_reaches_idas_step_count_with_jacrob():
    # IDA's row at 4e5 is reached by its step 202 and not by step 201; so with jacrob.
    problem = _with(roberts_problem(), jacrob)
    nst = next(r[4] for r in roberts_output() if r[0] == 4e5)

    def at_4e5(max_steps):
        solver = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                      initialize=False, max_steps=max_steps)
        return np.asarray(pdesolve(problem, solver, (0.0, 4e10), ROBERTS_Y0, ROBERTS_YP0,
                                   saveat=SaveAt(ts=np.array([4e5]))).ys[0])

    assert np.all(np.isfinite(at_4e5(nst))) and np.all(np.isnan(at_4e5(nst - 1))), nst


def test_a_flipped_sign_is_caught_and_named():
    def flipped(t, y, yp, c, args):        # dF2/dy1 is +0.04
        return jacrob(t, y, yp, c, args).at[1, 0].multiply(-1.0)

    problem = _with(roberts_problem(), flipped, check_jacobian=True)
    with pytest.raises(ValueError, match=r"c = 0\.0: at entry \(row 1, col 0\) J gives -0\.04 "
                                         r"where AD gives 0\.04"):
        _roberts(problem)


def test_a_flipped_sign_of_the_derivative_part_is_caught():
    def flipped(t, y, yp, c, args):        # dF1/dy1' is -1: -0.04 - c, not -0.04 + c
        return jacrob(t, y, yp, c, args).at[0, 0].add(2.0 * c)

    problem = _with(roberts_problem(), flipped, check_jacobian=True)
    with pytest.raises(ValueError, match=r"c = 1\.0: at entry \(row 0, col 0\) J gives 0\.96 "
                                         r"where AD gives -1\.04"):
        _roberts(problem)
    # Without the check the same J is used as given: the corrector fails with it.
    sol = _roberts(_with(roberts_problem(), flipped))
    assert sol.status is not Status.SUCCESS


def test_a_small_error_passes_a_loose_tolerance_only():
    def off(t, y, yp, c, args):
        return jacrob(t, y, yp, c, args) * (1.0 + 1e-4)

    dae.check_jacobian(_with(roberts_problem(), off), 0.0, ROBERTS_Y0, ROBERTS_YP0, rtol=1e-3)
    with pytest.raises(ValueError, match=r"relative error 0\.0001 > rtol 1e-06"):
        dae.check_jacobian(_with(roberts_problem(), off), 0.0, ROBERTS_Y0, ROBERTS_YP0)


def test_a_wrong_shape_is_refused_before_compiling():
    problem = _with(roberts_problem(), lambda t, y, yp, c, args: jacrob(t, y, yp, c, args)[:2])
    with pytest.raises(ValueError, match=r"returned shape \(2, 3\); .* shape \(9,\) .* dense "
                                         r"\(3, 3\) array"):
        _roberts(problem)
    with pytest.raises(TypeError, match="jacobian must be None or callable"):
        _with(roberts_problem(), np.eye(3))
    with pytest.raises(ValueError, match="pass jacobian="):
        dataclasses.replace(roberts_problem(), check_jacobian=True)


def test_check_waits_for_concrete_inputs_under_a_trace(caplog):
    def flipped(t, y, yp, c, args):
        return jacrob(t, y, yp, c, args).at[1, 0].multiply(-1.0)

    problem = _with(roberts_problem(), flipped, check_jacobian=True)
    with caplog.at_level(logging.WARNING, logger="solvers.dae._jacobian"):
        jax.jit(lambda y0: _solve_from(problem, y0))(jnp.asarray(ROBERTS_Y0))
    assert "checked at the first call with concrete ones" in caplog.text
    with pytest.raises(ValueError, match=r"row 1, col 0"):
        _solve_from(problem, ROBERTS_Y0)


def _solve_from(problem, y0):
    solver = JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                  initialize=False)
    return pdesolve(problem, solver, (0.0, 40.0), y0, ROBERTS_YP0).ys


# --- derivatives ------------------------------------------------------------------------------

GRAD_TS = np.array([0.4, 4.0, 40.0])
GRAD_SOLVER = JIDA(linear="dense", rtol=1e-10, atol=np.array(FSA_ATOL) * 1e-3)
WEIGHTS = np.array([[1.0, 1e4, 0.3], [0.5, 2e4, 1.0], [0.2, 3e4, 2.0]])


def _loss(problem):
    def loss(p):
        sol = pdesolve(problem, GRAD_SOLVER, (0.0, 40.0), FSA_Y0, FSA_YP0,
                       saveat=SaveAt(ts=GRAD_TS), args=p)
        return jnp.sum(WEIGHTS * sol.ys)

    return loss


def test_grad_wrt_the_rate_constants_with_a_user_jacobian():
    # idasRoberts_FSA_dns's problem (y'0 corrected by "ya_ydp") with its own Jac: jax.grad with
    # respect to p equals that of the differentiated matrix and central differences.
    p = jnp.asarray(FSA_P)
    user = _loss(_with(fsa_problem(), jac_fsa, check_jacobian=True))
    g_user = np.asarray(jax.jit(jax.grad(user))(p))
    g_ad = np.asarray(jax.jit(jax.grad(_loss(fsa_problem())))(p))
    np.testing.assert_allclose(g_user, g_ad, rtol=1e-8)
    value = jax.jit(user)
    for i in range(3):
        eps = 1e-4 * FSA_P[i]
        fd = (value(p.at[i].add(eps)) - value(p.at[i].add(-eps))) / (2 * eps)
        np.testing.assert_allclose(g_user[i], fd, rtol=1e-5)
    jac = np.asarray(jax.jit(jax.jacfwd(user))(p))
    np.testing.assert_allclose(jac, g_user, rtol=1e-12)


def test_an_approximate_jacobian_still_gives_exact_sensitivities():
    # A J 10 % too large: the corrector (and the sensitivities' iteration, against the same
    # factor) converge more slowly but to the same solution and derivatives.
    def approx(t, y, yp, c, p):
        return 1.1 * jac_fsa(t, y, yp, c, p)

    problem = _with(fsa_problem(), approx)
    p = jnp.asarray(FSA_P)
    sol = pdesolve(problem, GRAD_SOLVER, (0.0, 40.0), FSA_Y0, FSA_YP0, saveat=SaveAt(ts=GRAD_TS),
                   args=p)
    ad = pdesolve(fsa_problem(), GRAD_SOLVER, (0.0, 40.0), FSA_Y0, FSA_YP0,
                  saveat=SaveAt(ts=GRAD_TS), args=p)
    assert sol.status is Status.SUCCESS, sol.message
    assert int(sol.stats["newton_iterations"]) != int(ad.stats["newton_iterations"])  # J is used
    np.testing.assert_allclose(sol.ys, ad.ys, rtol=1e-7, atol=1e-15)
    jac_user = np.asarray(jax.jit(jax.jacfwd(_ys(problem)))(p))
    jac_ad = np.asarray(jax.jit(jax.jacfwd(_ys(fsa_problem())))(p))
    np.testing.assert_allclose(jac_user, jac_ad, rtol=1e-5, atol=1e-9 * np.abs(jac_ad).max())


def _ys(problem):
    return lambda p: pdesolve(problem, GRAD_SOLVER, (0.0, 40.0), FSA_Y0, FSA_YP0,
                              saveat=SaveAt(ts=GRAD_TS), args=p).ys


# --- a sparse pattern: idaHeat2D_klu ------------------------------------------------------------

def jac_heat(t, u, up, c, args):
    """``jacHeat`` of idaHeat2D_klu.c as the pattern's values: 1 on the boundary; inside
    ``c + 4 coeff`` on the diagonal and ``-coeff`` at the four neighbours."""
    rows, cols = dae.jacobian_entries(heat_problem())
    coeff = (MGRID - 1.0) ** 2
    diag = jnp.asarray(rows == cols)
    boundary = jnp.asarray(heat_problem().algebraic)[jnp.asarray(rows)]
    inside = jnp.where(diag, c + 4.0 * coeff, -coeff)
    return jnp.where(boundary, jnp.where(diag, 1.0, 0.0), inside)


def test_heat_2d_klu_with_jacheat_matches_ida():
    problem = _with(heat_problem(), jac_heat, check_jacobian=True)
    u0, up0 = heat_initial()
    rows = heat_output()
    ts = np.array([r[0] for r in rows])
    solver = JIDA(linear="klu", rtol=0.0, atol=HEAT_ATOL, constraints=np.ones(100, int))
    sol = pdesolve(problem, solver, (0.0, ts[-1]), u0, up0, saveat=SaveAt(ts=ts))
    assert sol.status is Status.SUCCESS, sol.message
    umax = np.abs(np.asarray(sol.ys)).max(axis=1)
    for (t, ida_umax, *_), u in zip(rows, umax):
        if t <= 0.64:
            assert f"{u:.5e}" == f"{ida_umax:.5e}", (t, u, ida_umax)
    assert int(sol.stats["steps"]) == rows[-1][3] == 232          # IDA's nst
    assert int(sol.stats["newton_iterations"]) == rows[-1][4] == 260   # IDA's nni


def test_a_wrong_sparse_entry_is_named_by_its_row_and_column():
    rows, cols = dae.jacobian_entries(heat_problem())
    k = int(np.flatnonzero((rows == 12) & (cols == 13))[0])

    def wrong(t, u, up, c, args):
        return jac_heat(t, u, up, c, args).at[k].set(0.0)

    u0, up0 = heat_initial()
    with pytest.raises(ValueError, match=r"\(row 12, col 13\) J gives 0\.0 where AD gives -81\.0"):
        dae.check_jacobian(_with(heat_problem(), wrong), 0.0, u0, up0)
