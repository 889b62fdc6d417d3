"""IDAS's idasRoberts_FSA_dns from its own inputs (data/idas/, see ida_examples.py): rtol 1e-6,
atol (1e-8, 1e-14, 1e-6), y0 = (1, 0, 0) and the inconsistent y'0 = (0.1, 0, 0), which the
initialization corrects as IDACalcIC does, its step sized from the first output time and cut to
0.5 / |y'0| (8.7e-6). Sized as 0.001 x the span (4e7) without the cut, as it once was, the solve
ended STEP_TOO_SMALL at t = 2.6e-3.

- The solve completes (938 steps, or 900 with XLA's default code generation; IDAS 1235, its
  steps also set by the sensitivities' and the quadrature's errors), and 27 of IDAS's 36
  printed y values agree to their printed digits (``%.4e``): all 21 up to t = 4e5, and y3 at
  every time.
- The other 9 (y1 from t = 4e6, y2 from 4e7) are each solver's own error at rtol 1e-6. Digits
  against scipy's Radau at rtol 1e-10 on the reduced ODE (y1 | y2; JIDA / IDAS):

  | t | y1 | y2 |
  | --- | --- | --- |
  | 4e6 | 4.9 / 6.1 | 4.9 / 5.6 |
  | 4e7 | 4.8 / 4.2 | 4.8 / 4.1 |
  | 4e8 | 3.6 / 4.2 | 3.6 / 4.3 |
  | 4e9 | 2.6 / 2.5 | 2.6 / 2.5 |
  | 4e10 | 2.1 / 2.0 | 2.1 / 2.0 |

  Both are within about 1% of the reference everywhere (IDAS's worst: 0.96% at 4e10). JIDA's
  figures above are with XLA:CPU's legacy loop emitters (tests/dae/conftest.py sets them for a
  whole-suite run on jax 0.10); XLA's default code generation rounds differently, and the same
  solve then takes 900 steps and ends 1.17% off at 4e10 (1.9 digits): the last decades' digits
  are the integrator's own error at rtol 1e-6, not a fixed figure, so the test bounds JIDA's late
  values at 2% and IDAS's printed ones at 1%.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from ida_examples import FSA_ATOL, FSA_P, FSA_RTOL, FSA_TS, FSA_Y0, FSA_YP0, fsa_output, fsa_problem
from scipy.integrate import solve_ivp

from solvers.dae import JIDA, SaveAt, Status, pdesolve

jax.config.update("jax_enable_x64", True)


@functools.cache
def _solve():
    solver = JIDA(linear="dense", rtol=FSA_RTOL, atol=np.array(FSA_ATOL))
    return pdesolve(fsa_problem(), solver, (0.0, 4e10), FSA_Y0, FSA_YP0,
                    saveat=SaveAt(ts=FSA_TS), args=FSA_P)


def _printed(a):
    return np.vectorize(lambda v: f"{v:.4e}")(a)


def _reference() -> np.ndarray:
    """Robertson as the ODE in (y1, y2) with y3 = 1 - y1 - y2, Radau at rtol 1e-10."""
    p1, p2, p3 = FSA_P

    def f(t, z):
        y1, y2 = z
        y3 = 1.0 - y1 - y2
        return [-p1 * y1 + p2 * y2 * y3, p1 * y1 - p2 * y2 * y3 - p3 * y2 * y2]

    def jac(t, z):
        y1, y2 = z
        y3 = 1.0 - y1 - y2
        return [[-p1 - p2 * y2, p2 * y3 - p2 * y2],
                [p1 + p2 * y2, -p2 * y3 + p2 * y2 - 2 * p3 * y2]]

    out = solve_ivp(f, (0.0, 4e10), [1.0, 0.0], method="Radau", rtol=1e-10, atol=[1e-22, 1e-26],
                    t_eval=FSA_TS, jac=jac)
    assert out.success, out.message
    return np.stack([out.y[0], out.y[1], 1.0 - out.y[0] - out.y[1]], axis=1)


def test_the_fsa_example_completes_from_idas_inputs_with_idas_printed_digits():
    rows = fsa_output()
    assert [r[0] for r in rows] == list(FSA_TS)
    sol = _solve()
    assert sol.status is Status.SUCCESS, sol.message
    ours = _printed(np.asarray(sol.ys))
    idas = _printed(np.array([r[2] for r in rows]))
    agree = ours == idas
    early = FSA_TS <= 4e5
    assert agree[early].all(), (ours[early], idas[early])
    assert agree[:, 2].all(), (ours[:, 2], idas[:, 2])
    assert agree.sum() >= 27, agree


def test_where_the_printed_digits_differ_both_solvers_are_within_a_few_percent_of_the_truth():
    ref = _reference()
    ys = np.asarray(_solve().ys)
    idas = np.array([r[2] for r in fsa_output()])
    assert np.abs(ys / ref - 1.0).max() < 0.02
    assert np.abs(idas / ref - 1.0).max() < 0.01
    # up to 4e5 both hold about 5 digits or more
    early = FSA_TS <= 4e5
    assert np.abs(ys[early] / ref[early] - 1.0).max() < 2e-5
