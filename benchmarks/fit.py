"""A fit against scipy.optimize.least_squares(method="trf") on the same residuals, same run.

The problem: 12 experiments (a reaction A <-> B -> C at 12 temperatures, Arrhenius rates), an
explicit ODE model (`solvers.inference.ODEModel`) observed in B and C at 300 times each, and 5
parameters (k1, k2, k3 log-transformed, an activation temperature E, the initial amount A0),
started away from the truth. scipy gets the same jitted residual function (all experiments
vmapped, the same fitted coordinates and bounds), first with its default finite-difference
Jacobian ("2-point"), then with the exact JAX Jacobian.

Printed (medians of --repeats after warm-up; first calls, which compile, separately):
    time_ratio_warm:       scipy trf (2-point) time / solvers time   (> 1: solvers faster)
    time_ratio_warm_jac:   scipy trf (exact JAX jacobian) time / solvers time
    time_ratio_first_call: scipy first call / solvers first call (both include JIT compiles)
    nfev_ratio:            scipy nfev / solvers nfev (residual evaluations; scipy's
                           finite-difference evaluations counted separately as model_evals_ratio)
    speedup_1_to_2_devices: solvers time on 1 device / on 2 emulated CPU devices

    python benchmarks/fit.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402

import solvers as ds  # noqa: E402

inference = ds.inference
TRUTH = {"k1": 0.8, "k2": 0.3, "k3": 0.5, "E": 3.0, "A0": 1.0}
NAMES = tuple(TRUTH)
TIMES = np.linspace(0.0, 10.0, 300)
TEMPERATURES = np.linspace(0.28, 0.34, 12)   # kK
NOISE = 0.005


def rhs(t, y, p, c):
    s = jnp.exp(-p["E"] * (1.0 / c["T"] - 1.0 / 0.3))
    k1, k2, k3 = p["k1"] * s, p["k2"] * s, p["k3"] * s
    a, b, _ = y[0], y[1], y[2]
    return jnp.stack([-k1 * a + k2 * b, k1 * a - (k2 + k3) * b, k3 * b])


MODEL = inference.ODEModel(rhs, lambda p, c: jnp.stack([p["A0"], 0.0 * p["A0"], 0.0 * p["A0"]]),
                           observe=lambda y, p, c: {"B": y[1], "C": y[2]}, rtol=1e-8, atol=1e-10)


def problem(seed: int = 0) -> inference.InferenceProblem:
    rng = np.random.default_rng(seed)
    truth = {k: jnp.asarray(v) for k, v in TRUTH.items()}
    experiments = []
    for i, temperature in enumerate(TEMPERATURES):
        out = MODEL(truth, {"T": temperature}, TIMES)
        experiments.append(inference.Experiment(f"T-{i}", MODEL, {"T": temperature}, [
            inference.Measurement(TIMES, np.asarray(out[name]) + NOISE * rng.standard_normal(
                TIMES.size), noise=NOISE, observable=name) for name in ("B", "C")]))
    params = (inference.Parameter("k1", 0.4, lower=0.0, log=True),
              inference.Parameter("k2", 0.6, lower=0.0, log=True),
              inference.Parameter("k3", 0.2, lower=0.0, log=True),
              inference.Parameter("E", 1.0, lower=0.0, upper=20.0),
              inference.Parameter("A0", 0.7, lower=0.0))
    return inference.InferenceProblem(experiments, parameters=params)


def scipy_functions(prob: inference.InferenceProblem):
    """The same residuals as the fit, as jitted functions of the fitted coordinates."""
    log = np.array([p.log for p in prob.parameters])
    conditions = {"T": jnp.asarray([e.conditions["T"] for e in prob.experiments])}
    values = jnp.asarray([np.stack([m.values for m in e.measurements], axis=1)
                          for e in prob.experiments])  # (12, 300, 2)

    def residuals(x):
        theta = jnp.where(log, jnp.exp(x), x)
        params = dict(zip(NAMES, theta))
        out = jax.vmap(lambda c: MODEL(params, c, jnp.asarray(TIMES)))(conditions)
        pred = jnp.stack([out["B"], out["C"]], axis=-1)
        return ((pred - values) / NOISE).reshape(-1)

    fun = jax.jit(residuals)
    jac = jax.jit(jax.jacfwd(residuals))
    x0 = np.array([np.log(p.initial) if p.log else p.initial for p in prob.parameters])
    lo = np.array([(np.log(p.lower) if p.lower > 0 else -np.inf) if p.log else p.lower
                   for p in prob.parameters])
    hi = np.array([p.upper for p in prob.parameters])
    return (lambda x: np.asarray(fun(x))), (lambda x: np.asarray(jac(x))), x0, (lo, hi), log


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    prob = problem()
    method = inference.TrustRegion()
    one = ds.Layout(mesh=Mesh(np.array(jax.devices()[:1]), ("data",)))
    two = ds.Layout(mesh=ds.global_mesh(("data",)))

    first_ours, res = timed(lambda: inference.optsolve(prob, method, layout=one))
    fun, jac, x0, bounds, log = scipy_functions(prob)
    first_scipy, ref = timed(lambda: least_squares(fun, x0, bounds=bounds, method="trf"))
    lowered1, lowered2 = ds.lower(prob, one), ds.lower(prob, two)
    inference.optsolve(lowered2, method)          # compile the 2-device fit
    least_squares(fun, x0, jac=jac, bounds=bounds, method="trf")   # compile the jacobian

    ours = [timed(lambda: inference.optsolve(lowered1, method))[0] for _ in range(args.repeats)]
    ours2 = [timed(lambda: inference.optsolve(lowered2, method))[0] for _ in range(args.repeats)]
    scipy_fd = [timed(lambda: least_squares(fun, x0, bounds=bounds, method="trf"))[0]
                for _ in range(args.repeats)]
    scipy_jac, ref_jac = [], None
    for _ in range(args.repeats):
        t, ref_jac = timed(lambda: least_squares(fun, x0, jac=jac, bounds=bounds, method="trf"))
        scipy_jac.append(t)
    ours_t, ours2_t = statistics.median(ours), statistics.median(ours2)

    theta_ref = np.where(log, np.exp(ref.x), ref.x)
    print(f"problem: {len(prob.experiments)} experiments, {len(NAMES)} parameters, "
          f"{res.n_residuals} residuals, ODE model ({len(TIMES)} times, 2 observables)")
    print(f"solvers: {res.termination}, cost {res.cost:.10g}, nfev {res.nfev}, "
          f"{ours_t * 1e3:.1f} ms warm, {first_ours:.2f} s first call; 2 devices "
          f"{ours2_t * 1e3:.1f} ms; assignment {lowered2.assignment}")
    print(f"scipy trf 2-point: status {ref.status}, cost {ref.cost:.10g}, nfev {ref.nfev}, "
          f"njev {ref.njev}, {statistics.median(scipy_fd) * 1e3:.1f} ms warm, "
          f"{first_scipy:.2f} s first call")
    print(f"scipy trf jac:     status {ref_jac.status}, cost {ref_jac.cost:.10g}, nfev "
          f"{ref_jac.nfev}, njev {ref_jac.njev}, {statistics.median(scipy_jac) * 1e3:.1f} ms warm")
    print("max relative parameter difference solvers vs scipy: "
          f"{max(abs(res[n] / t - 1) for n, t in zip(NAMES, theta_ref)):.2e}")
    print(f"time_ratio_warm: {statistics.median(scipy_fd) / ours_t:.2f}")
    print(f"time_ratio_warm_jac: {statistics.median(scipy_jac) / ours_t:.2f}")
    print(f"time_ratio_first_call: {first_scipy / first_ours:.2f}")
    print(f"nfev_ratio: {ref.nfev / res.nfev:.2f}")
    print(f"model_evals_ratio: {(ref.nfev + ref.njev * len(NAMES)) / res.nfev:.2f}")
    print(f"speedup_1_to_2_devices: {ours_t / ours2_t:.2f}")


if __name__ == "__main__":
    main()
