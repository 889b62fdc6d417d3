"""NIST StRD's hard nonlinear fits from NIST's own starts: optsolve against scipy, same run.

The eight datasets of higher difficulty (MGH09, Thurber, BoxBOD, Rat42, MGH10, Eckerle4, Rat43,
Bennett5), each from both of NIST's starting points, read with the certified values and standard
deviations from tests/reference/data/nist-nonlinear/. Three fitters:

    default: optsolve(problem)                               (TrustRegion())
    tight:   optsolve(problem, TrustRegion.tight())
    scipy:   scipy.optimize.least_squares(method="trf", ftol=xtol=gtol=1e-15, max_nfev=2000)
             with the exact Jacobian (jax.jacfwd, jitted); its standard errors from an SVD of
             that Jacobian at its solution, scaled by RSS / (m - n) as NIST's are.

Printed per dataset and start: the digits (LRE, minimum over the parameters) of the parameters
(p) and of the standard errors (se) for each, whether each converged (a trailing '!' marks a fit
that did not), and the warm time ratios scipy / default and scipy / tight (medians of --repeats
after a first call, which compiles; > 1: optsolve faster). The last lines summarize.

    python benchmarks/nist_fits.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
from nist_nonlinear import MODELS, fit_model, load, lre  # noqa: E402

import solvers as ds  # noqa: E402

inference = ds.inference
HARD = ["MGH09", "Thurber", "BoxBOD", "Rat42", "MGH10", "Eckerle4", "Rat43", "Bennett5"]


def _timed(call, repeats: int):
    out = call()                      # the first call compiles
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
    return out, statistics.median(times)


def _digits(values, certified) -> float:
    return min(lre(float(v), c) for v, c in zip(values, certified))


def _optsolve(d, model, start: int, method, repeats: int):
    k = len(d.certified)
    experiment = inference.Experiment(d.name, model, {"x": d.x}, inference.Measurement(
        np.arange(d.x.size, dtype=float), d.y))
    params = tuple(inference.Parameter(f"b{i + 1}", v) for i, v in enumerate(d.starts[start]))
    problem = inference.InferenceProblem([experiment], parameters=params)
    res, seconds = _timed(lambda: inference.optsolve(problem, method), repeats)
    names = [f"b{i + 1}" for i in range(k)]
    errors = res.standard_errors
    return (_digits([res[n] for n in names], d.certified),
            _digits([errors[n] for n in names], d.certified_sd), res.converged, seconds)


def _scipy(d, start: int, repeats: int):
    f = MODELS[d.name]
    x, y = jnp.asarray(d.x), jnp.asarray(d.y)
    residuals = jax.jit(lambda b: f(b, x) - y)
    jacobian = jax.jit(jax.jacfwd(lambda b: f(b, x) - y))

    def fit():
        return least_squares(lambda b: np.asarray(residuals(b)), np.asarray(d.starts[start]),
                             jac=lambda b: np.asarray(jacobian(b)), method="trf", ftol=1e-15,
                             xtol=1e-15, gtol=1e-15, max_nfev=2000)

    res, seconds = _timed(fit, repeats)
    m, n = res.fun.size, res.x.size
    _, s, vt = np.linalg.svd(np.asarray(jacobian(res.x)), full_matrices=False)
    cov = (vt.T / s**2) @ vt * (2.0 * res.cost / (m - n))
    return (_digits(res.x, d.certified), _digits(np.sqrt(np.diag(cov)), d.certified_sd),
            res.status > 0, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tight = inference.TrustRegion.tight()
    rows = []
    print(f"{'dataset':9s} {'start':>5s} | {'default p':>9s} {'se':>6s} | {'tight p':>8s} "
          f"{'se':>6s} | {'scipy p':>8s} {'se':>6s} | {'scipy/default':>13s} "
          f"{'scipy/tight':>11s}")
    for name in HARD:
        d = load(name)
        model = fit_model(name, len(d.certified))
        for start in (0, 1):
            a = _optsolve(d, model, start, None, args.repeats)
            b = _optsolve(d, model, start, tight, args.repeats)
            c = _scipy(d, start, args.repeats)
            rows.append((name, start + 1, a, b, c))

            def cell(r, width):
                mark = "" if r[2] else "!"
                return f"{r[0]:{width}.2f}{mark:1s} {r[1]:5.2f}"

            print(f"{name:9s} {start + 1:5d} | {cell(a, 8)} | {cell(b, 7)} | {cell(c, 7)} | "
                  f"{c[3] / a[3]:13.2f} {c[3] / b[3]:11.2f}", flush=True)
    for label, i in (("default", 2), ("tight", 3), ("scipy", 4)):
        p = [r[i][0] for r in rows]
        se = [r[i][1] for r in rows]
        print(f"{label}: parameters >= 6 digits on {sum(v >= 6 for v in p)}/16, min {min(p):.2f}, "
              f"median {statistics.median(p):.2f}; standard errors min {min(se):.2f}, median "
              f"{statistics.median(se):.2f}; converged {sum(r[i][2] for r in rows)}/16")
    for label, i in (("default", 2), ("tight", 3)):
        ratios = [r[4][3] / r[i][3] for r in rows]
        print(f"time scipy / {label}: median {statistics.median(ratios):.2f}, range "
              f"{min(ratios):.2f} to {max(ratios):.2f}")


if __name__ == "__main__":
    main()
