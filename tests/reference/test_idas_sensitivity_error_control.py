"""IDAS's idasRoberts_FSA_dns with its sensitivities in the error test (`-sensi stg t`,
``IDASetSensErrCon``), from its own inputs, with ``JIDA(sensitivity_error_control=True)``:
each printed value's digits against a tight reference nobody here stepped (scipy's Radau at
rtol 1e-11 on the reduced ODE with its sensitivity system, fsa_reference.py, stored in
data/idas/fsa_reference.txt), beside IDAS's printed value's digits.

Digits are ``-log10 |v / ref - 1|``, capped for both at what IDAS's ``%.4e`` can hold (``-log10
(5e-5 / mantissa)``, 4.3-5.3): a printed value closer than its own rounding is not more digits.
Of the 144 printed values (36 states, 108 sensitivities), every one at every time but t = 4e8
has at least IDAS's digits minus 0.3 (at 4e9 and 4e10 JIDA's hold more: 3.4-3.5 and 1.9-2.4
against IDAS's 2.5 and 1.9-2.0). At t = 4e8 the states y1, y2 and all the sensitivities hold
3.8 digits (3.7 with XLA:CPU's legacy emitters, which tests/dae/conftest.py sets for a
whole-suite run), where IDAS's printed values hold 4.1-4.3. From 4e8 on the error is each
integrator's global error once y1 nears its atol (1e-8; y1 = 5e-6 at 4e8, 5e-8 at 4e10), which
does not follow the tolerances: tightening all of JIDA's 2-4 times moved its digits there up
and down by about 0.5. JIDA's steps' own sensitivities, without the option, fall short at
earlier times too: at t = 0.4 (3.4 digits, IDAS 4.5-4.9) and 4e7.

IDAS's printed digits at 4e8 are one draw of a spread (idas_perturbed.py, data/idas/
fsa_perturbed.txt): rerun from y1(0) = 1 + f, f between 1e-15 and 1e-10 (invisible in the
printed digits), IDAS takes 1146-1465 steps, and 14 of its 20 reruns fall short of its own
printed digits minus 0.3 at 4e8 (3.14-4.3 digits), 7 at t = 0.4. Over the same 21 starts,
JIDA's worst digits at each time and value are IDAS's worst or more, less 0.01 at most (3.43
against 3.14 at 4e8), and the median over the starts of each time's fewest digits is within
0.06 (0.20 with the legacy emitters) of IDAS's: 3.82 (3.68) against 3.88 at 4e8, 0 elsewhere.

dG/dp (G = int y3 dt, the example's quadrature, its sensitivities from the same solve) against
its exact value (fsa_reference.quadrature: (1.4877157e+06, -5.9462715e+00, 9.9104934e-04)),
whose digits IDAS's printed (1.4878e+06, -5.9466e+00, 9.9111e-04) hold 4.2-4.3 of: with G and
its sensitivities in the error test too (``Quadrature(error_control=True)``, IDAS's
IDASetQuadErrCon and IDASetQuadSensErrCon; 1266 steps against 1208) JIDA's hold 4.6. With G
outside it, as the example keeps it, 3.5 (3.1e-4 low, nearly all of it from the last decade,
4e9 to 4e10, whose sensitivities hold 1.9 digits in both integrators): 3.8e-4 from IDAS's
printed values (2.7e-4 with the legacy emitters), against 3.3e-3 (3.4e-2) without the option.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from fsa_reference import load, quadrature
from ida_examples import (
    FSA_ATOL,
    FSA_P,
    FSA_RTOL,
    FSA_TS,
    FSA_Y0,
    FSA_YP0,
    fsa_output,
    fsa_problem,
    fsa_quadrature_output,
)
from idas_perturbed import load as perturbed

from solvers.dae import JIDA, Quadrature, SaveAt, Status, pdesolve

jax.config.update("jax_enable_x64", True)

OWN_STEPS = JIDA(linear="dense", rtol=FSA_RTOL, atol=np.array(FSA_ATOL))
CONTROLLED = dataclasses.replace(OWN_STEPS, sensitivity_error_control=True)
G = Quadrature(lambda t, y, yp, p: y[2:3])
#: G and its sensitivities in the error test (IDAS's IDASetQuadErrCon, IDASetQuadSensErrCon)
G_CONTROLLED = Quadrature(lambda t, y, yp, p: y[2:3], error_control=True, atol=1e-6)
#: dG/dp's largest relative difference from IDAS's printed values (module docstring)
DG_BOUND = 1e-3


def digits(v: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Digits of ``v`` against ``ref``, capped at what ``%.4e`` holds of ``ref``."""
    mantissa = np.abs(ref) / 10.0 ** np.floor(np.log10(np.abs(ref)))
    cap = -np.log10(5e-5 / mantissa)
    return np.minimum(-np.log10(np.maximum(np.abs(v / ref - 1.0), 1e-300)), cap)


@functools.cache
def _solve(solver: JIDA):
    """The states (12, 3), their sensitivities (12, 3 parameters, 3 unknowns), the status."""
    def states(p):
        sol = pdesolve(fsa_problem(), solver, (0.0, 4e10), FSA_Y0, FSA_YP0,
                       saveat=SaveAt(ts=FSA_TS), args=p)
        return sol.ys, sol

    jac, sol = jax.jacfwd(states, has_aux=True)(jnp.asarray(FSA_P))
    return np.asarray(sol.ys), np.transpose(np.asarray(jac), (0, 2, 1)), sol.status


def _idas():
    rows = fsa_output()
    return np.array([r[2] for r in rows]), np.array([r[3] for r in rows])


def test_the_reference_is_the_example_idas_printed_values_agree_with_it():
    ry, rs = load()
    iy, isens = _idas()
    # the same problem: IDAS holds 4 digits or more up to 4e8, and 1.9 or more everywhere
    early = FSA_TS <= 4e8
    assert digits(iy, ry)[early].min() >= 4.0
    assert digits(isens, rs)[early].min() >= 4.0
    assert digits(iy, ry).min() >= 1.9 and digits(isens, rs).min() >= 1.9


def test_with_sensitivity_error_control_each_value_holds_idas_digits_less_0_3():
    ry, rs = load()
    iy, isens = _idas()
    ys, sens, status = _solve(CONTROLLED)
    assert status is Status.SUCCESS
    short_y = digits(ys, ry) - digits(iy, ry)
    short_s = digits(sens, rs) - digits(isens, rs)
    at_4e8 = np.isclose(FSA_TS, 4e8)
    assert short_y[~at_4e8].min() >= -0.3, short_y
    assert short_s[~at_4e8].min() >= -0.3, short_s.min(axis=(1, 2))
    # at 4e8 (module docstring): within 0.8 digits of IDAS's, and 3.6 digits or more
    assert short_y[at_4e8].min() >= -0.8 and short_s[at_4e8].min() >= -0.8
    assert digits(ys, ry)[at_4e8].min() >= 3.6 and digits(sens, rs)[at_4e8].min() >= 3.6


def test_without_the_option_the_steps_own_sensitivities_fall_short_before_4e8():
    # the check above fails without the option: at t = 0.4 (and 4e7 with the legacy emitters)
    rs = load()[1]
    isens = _idas()[1]
    before = FSA_TS < 3e8
    own = (digits(_solve(OWN_STEPS)[1], rs) - digits(isens, rs))[before]
    controlled = (digits(_solve(CONTROLLED)[1], rs) - digits(isens, rs))[before]
    assert own.min() < -0.3 <= controlled.min(), (own.min(), controlled.min())


def _digits_of(v, ref) -> np.ndarray:
    """Digits of ``v`` against ``ref``, uncapped (``ref`` is exact to 12 digits)."""
    return -np.log10(np.maximum(np.abs(np.asarray(v) / ref - 1.0), 1e-300))


@functools.cache
def _exact_g():
    return quadrature()


def _g_and_dg(quad: Quadrature):
    def g(p):
        sol = pdesolve(fsa_problem(), CONTROLLED, (0.0, 4e10), FSA_Y0, FSA_YP0,
                       saveat=SaveAt(ts=np.array([0.0, 4e10])), args=p, quadrature=quad)
        return sol.qs[-1, 0], sol.qs[-1, 0]

    dg, g = jax.jacfwd(g, has_aux=True)(jnp.asarray(FSA_P))
    return float(g), np.asarray(dg)


def test_dg_dp_with_the_quadrature_in_the_error_test_holds_more_digits_than_idas():
    g_idas, dg_idas = fsa_quadrature_output()
    g_exact, dg_exact = _exact_g()
    assert f"{g_exact:.4e}" == f"{g_idas:.4e}"
    assert np.all(_digits_of(dg_idas, dg_exact) > 4.0), (dg_idas, dg_exact)   # 4.2-4.3
    g, dg = _g_and_dg(G_CONTROLLED)
    assert f"{g:.4e}" == f"{g_idas:.4e}"
    ours, idas = _digits_of(dg, dg_exact), _digits_of(dg_idas, dg_exact)
    assert np.all(ours >= idas), (ours, idas)                                  # 4.6 against 4.2


def test_dg_dp_with_idas_own_settings_falls_short_of_idas():
    """IDAS keeps its quadrature outside the error test (no IDASetQuadErrCon): so does `G`
    here, and dG/dp then holds 3.5 digits, IDAS's printed values 4.2 (module docstring)."""
    g_idas, dg_idas = fsa_quadrature_output()
    _, dg_exact = _exact_g()
    g, dg = _g_and_dg(G)
    assert f"{g:.4e}" == f"{g_idas:.4e}"
    assert np.abs(dg / dg_idas - 1.0).max() < DG_BOUND, (dg, dg_idas)
    ours = _digits_of(dg, dg_exact)
    assert np.all(ours > 3.2), ours
    assert np.all(ours < _digits_of(dg_idas, dg_exact)), ours       # the shortfall, named


def _printed_digits(ys: np.ndarray, sens: np.ndarray) -> np.ndarray:
    """Digits of each printed value, ``(runs, 12 times, 12 values)``: y, then dy/dp."""
    ry, rs = load()
    return np.concatenate([digits(ys, ry[None]),
                           digits(sens, rs[None]).reshape(len(ys), 12, 9)], axis=2)


def _as_printed(v: np.ndarray) -> np.ndarray:
    return np.array([float(f"{x:.4e}") for x in v.ravel()]).reshape(v.shape)


def _idas_reruns() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shifts of y1(0), IDAS's steps and its digits as printed (``%.4e``) for each."""
    shifts, steps, ys, sens = perturbed()
    return shifts, steps, _printed_digits(_as_printed(ys), _as_printed(sens))


def test_idas_reruns_from_y1_moved_by_rounding_mostly_miss_its_printed_digits_at_4e8():
    shifts, steps, idas = _idas_reruns()
    assert shifts[0] == 0.0 and np.all(np.abs(shifts[1:]) <= 1e-10)
    iy, isens = _idas()
    # the unshifted rerun is the published example to the printed digit
    assert np.array_equal(_printed_digits(iy[None], isens[None])[0], idas[0])
    assert steps[0, -1] == 1235 and len(set(steps[:, -1])) > 10
    at_4e8 = int(np.flatnonzero(np.isclose(FSA_TS, 4e8))[0])
    short = (idas[1:, at_4e8] - idas[0, at_4e8]).min(axis=1) < -0.3
    assert short.sum() > len(short) // 2, short           # 14 of 20


def test_over_the_same_starts_jida_worst_and_median_digits_hold_idas_less_0_3():
    shifts, _, idas = _idas_reruns()
    ys, sens = [], []
    for shift in shifts:
        y0 = np.array(FSA_Y0, dtype=float)
        y0[0] = 1.0 + shift
        jac, sol = _controlled_jacobian(y0)
        assert sol.status is Status.SUCCESS
        ys.append(np.asarray(sol.ys))
        sens.append(np.transpose(np.asarray(jac), (0, 2, 1)))
    ours = _printed_digits(np.array(ys), np.array(sens))
    assert np.all(ours.min(axis=0) >= idas.min(axis=0) - 0.3), \
        (ours.min(axis=0) - idas.min(axis=0)).min(axis=1)
    median_short = np.median(ours.min(axis=2), axis=0) - np.median(idas.min(axis=2), axis=0)
    assert median_short.min() >= -0.3, median_short


def _controlled_jacobian(y0: np.ndarray):
    def states(p):
        sol = pdesolve(fsa_problem(), CONTROLLED, (0.0, 4e10), y0, FSA_YP0,
                       saveat=SaveAt(ts=FSA_TS), args=p)
        return sol.ys, sol

    return jax.jacfwd(states, has_aux=True)(jnp.asarray(FSA_P))
