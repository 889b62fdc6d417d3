"""A small stand-in for `solvers.inference`, used by the examples until the solver core lands.

It has the names the seed's checkpointing example uses (`inference.InferenceProblem`,
`inference.optsolve`, `inference.NewtonTrustRegion`) and really fits: a damped Gauss-Newton
least-squares fit in pure Python of the decay of a tracer in one particle,
``c(t) = c0 * exp(-(k + D * q**2) * t)``, measured under several conditions ``q``.
"""

from __future__ import annotations

import math
import random
import time
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    name: str
    initial: float


@dataclass(frozen=True)
class Experiment:
    id: str
    q: float
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class InferenceProblem:
    experiments: tuple[Experiment, ...]
    parameters: tuple[Parameter, ...]


@dataclass(frozen=True)
class NewtonTrustRegion:
    grad_tol: float = 1e-6
    max_steps: int = 100


class Result:
    def __init__(self, values: dict[str, float], converged: bool, cost: float, iterations: int):
        self.values, self.converged, self.cost, self.iterations = values, converged, cost, iterations

    def __getitem__(self, parameter: Parameter) -> float:
        return self.values[parameter.name]


def _residuals(problem: InferenceProblem, d: float, k: float):
    rows = []
    for e in problem.experiments:
        rate = k + d * e.q**2
        for t, v in zip(e.times, e.values):
            model = math.exp(-rate * t)
            rows.append((model - v, -e.q**2 * t * model, -t * model))
    return rows


def optsolve(problem: InferenceProblem, method: NewtonTrustRegion) -> Result:
    """Fit (D, k) by Levenberg-damped Gauss-Newton; 2x2 normal equations solved in closed form."""
    d, k = (p.initial for p in problem.parameters)
    lam, cost = 1e-3, math.inf
    for it in range(1, method.max_steps + 1):
        rows = _residuals(problem, d, k)
        cost = 0.5 * sum(r * r for r, _, _ in rows)
        g = [sum(r * a for r, a, _ in rows), sum(r * b for r, _, b in rows)]
        if max(abs(g[0]), abs(g[1])) < method.grad_tol:
            return Result({"D": d, "k": k}, True, cost, it)
        h = [[sum(a * a for _, a, _ in rows), sum(a * b for _, a, b in rows)], [0.0, 0.0]]
        h[1] = [h[0][1], sum(b * b for _, _, b in rows)]
        while True:
            a11, a22 = h[0][0] * (1 + lam), h[1][1] * (1 + lam)
            det = a11 * a22 - h[0][1] ** 2
            step = [-(a22 * g[0] - h[0][1] * g[1]) / det, -(a11 * g[1] - h[0][1] * g[0]) / det]
            nd, nk = d + step[0], k + step[1]
            new = 0.5 * sum(r * r for r, _, _ in _residuals(problem, nd, nk))
            if new <= cost:
                d, k, lam = nd, nk, lam / 3
                break
            lam *= 4
            if lam > 1e12:
                return Result({"D": d, "k": k}, False, cost, it)
    return Result({"D": d, "k": k}, False, cost, method.max_steps)


def three_particles(seed: int = 0, work_seconds: float = 0.0) -> tuple[Experiment, ...]:
    """Six experiments: particles A, B, C, each measured at two conditions q."""
    truth = {"A": (0.5, 0.2), "B": (1.0, 0.1), "C": (0.3, 0.6)}
    rng = random.Random(seed)
    out = []
    times = tuple(0.1 * i for i in range(1, 21))
    for name, (d, k) in truth.items():
        for n, q in enumerate((0.5, 1.5), start=1):
            values = tuple(math.exp(-(k + d * q * q) * t) * (1 + 0.002 * rng.gauss(0, 1))
                           for t in times)
            out.append(Experiment(f"{name}-{n}", q, times, values))
    if work_seconds:
        time.sleep(work_seconds)
    return tuple(out)


inference = types.SimpleNamespace(
    InferenceProblem=InferenceProblem, NewtonTrustRegion=NewtonTrustRegion, optsolve=optsolve,
    Parameter=Parameter, Experiment=Experiment,
)
