"""The three-particle model of the examples and the fit benchmark.

Spherical particles A, B and C take up a species from a surrounding solution and consume it by a
first-order reaction: ``c_t = D (c_rr + 2 c_r / r) - k c`` for ``0 < r < R``. Method of lines
on ``cells`` finite volumes (cell centres, fluxes through the faces, no flux at the centre) plus
an algebraic surface node ``c_s``: the diffusive flux reaching the surface equals the film
transfer ``kappa (c_b - c_s)`` from the solution at concentration ``c_b``. The surface equation
has no time derivative, so the model is an index-1 DAE with a tridiagonal iteration matrix.

Each particle is measured in two experiments (six in all) at different solution concentrations
``c_b``: the uptake (the volume-averaged concentration) and the surface concentration over time.
`particle_experiments` makes synthetic measurements from known ``D``, ``k`` with seeded noise.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..linear import Pattern
from ._jida import JIDA
from ._pdesolve import pdesolve
from ._problem import DAEProblem
from ._solution import SaveAt

__all__ = ["PARTICLES", "SOLUTIONS", "TIMES", "ParticleModel", "ParticleSpec",
           "particle_experiments"]

#: The true ``(D, k)`` of each particle.
PARTICLES: dict[str, tuple[float, float]] = {"A": (0.5, 0.2), "B": (1.0, 0.1), "C": (0.3, 0.6)}
#: The solution concentration ``c_b`` of experiments 1 and 2 of each particle.
SOLUTIONS: tuple[float, float] = (1.0, 2.5)
#: Measurement times.
TIMES: np.ndarray = np.linspace(0.1, 3.0, 30)


@dataclass(frozen=True)
class ParticleSpec:
    """The discretized particle: ``cells`` finite volumes and the surface node.

    Attributes:
        cells: radial finite volumes; the problem has ``cells + 1`` unknowns.
        radius: the particle radius ``R``.
        transfer: the film transfer coefficient ``kappa``.

    ``build(layout=None)`` returns the `DAEProblem` (cached: the same spec and layout give the
    same problem, so solves compile once). Its residual reads ``args["D"]``, ``args["k"]`` and
    ``args["c_b"]``; the problem carries `default_args` (particle A in its first solution), so
    ``pdesolve(problem, solver, span, y0)`` runs without ``args=``, and ``args=`` replaces them.
    """

    cells: int = 50
    radius: float = 1.0
    transfer: float = 5.0

    def __post_init__(self) -> None:
        if not (isinstance(self.cells, int) and self.cells >= 2):
            raise ValueError(f"ParticleSpec(cells=...) must be an int >= 2, got {self.cells!r}")
        if not (self.radius > 0 and self.transfer > 0):
            raise ValueError(f"ParticleSpec needs radius > 0 and transfer > 0, got "
                             f"radius={self.radius!r}, transfer={self.transfer!r}")

    @property
    def n(self) -> int:
        return self.cells + 1

    def geometry(self) -> tuple[float, np.ndarray, np.ndarray]:
        """``(dr, face areas / 4 pi at the inner faces, cell volumes / 4 pi)``."""
        dr = self.radius / self.cells
        faces = dr * np.arange(self.cells + 1)
        volumes = (faces[1:] ** 3 - faces[:-1] ** 3) / 3.0
        return dr, faces[1:-1] ** 2, volumes

    def residual(self, t: Any, y: jax.Array, yp: jax.Array, args: Mapping[str, Any]) -> jax.Array:
        """``F(t, y, y', args)``: cell balances, then the surface condition."""
        dr, area, volume = self.geometry()
        D, k, cb = args["D"], args["k"], args["c_b"]
        c, cs = y[:-1], y[-1]
        inner = area * D * (c[1:] - c[:-1]) / dr
        outer = self.radius**2 * D * (cs - c[-1]) / (0.5 * dr)
        into = jnp.concatenate([inner, outer[None]])
        out_of = jnp.concatenate([jnp.zeros((1,), y.dtype), inner])
        cells = yp[:-1] - (into - out_of) / volume + k * c
        surface = D * (cs - c[-1]) / (0.5 * dr) - self.transfer * (cb - cs)
        return jnp.concatenate([cells, surface[None]])

    def pattern(self) -> Pattern:
        i = np.arange(self.n)
        rows = np.concatenate([i, i[1:], i[:-1]])
        cols = np.concatenate([i, i[:-1], i[1:]])
        return Pattern.from_coo(rows, cols, self.n)

    def default_args(self) -> dict[str, float]:
        """The parameters a built problem carries: particle A's true ``D`` and ``k``
        (`PARTICLES`) in the first solution concentration ``c_b`` (`SOLUTIONS`)."""
        D, k = PARTICLES["A"]
        return {"D": D, "k": k, "c_b": SOLUTIONS[0]}

    def build(self, layout: Any = None) -> DAEProblem:
        """The `DAEProblem` (see the class docstring); ``layout`` is recorded on it."""
        return _build(self, layout)

    def initial_state(self) -> np.ndarray:
        """An empty particle (the surface node is made consistent by the solver)."""
        return np.zeros(self.n)

    def uptake(self, ys: jax.Array | np.ndarray) -> jax.Array:
        """The volume-averaged concentration of states ``(..., n)``."""
        _, _, volume = self.geometry()
        return jnp.asarray(ys)[..., :-1] @ jnp.asarray(volume) / (self.radius**3 / 3.0)


@functools.lru_cache(maxsize=64)
def _build_cached(spec: ParticleSpec, layout: Any) -> DAEProblem:
    return DAEProblem(spec.residual, spec.pattern(), algebraic=[spec.cells],
                      args=spec.default_args(), layout=layout,
                      name=f"particle({spec.cells} cells)")


def _build(spec: ParticleSpec, layout: Any) -> DAEProblem:
    try:
        hash(layout)
    except TypeError:
        return _build_cached.__wrapped__(spec, layout)
    return _build_cached(spec, layout)


@dataclass(frozen=True)
class ParticleModel:
    """The particle as a fit model: ``model(params, conditions, times)``.

    Reads ``params["D"]``, ``params["k"]`` and ``conditions["c_b"]``; returns
    ``{"uptake": ..., "surface": ...}`` at ``times`` (integrated from 0). Hashable, so a fit
    compiles once; ``steps(...)`` counts the solver's steps (used to balance devices).
    """

    spec: ParticleSpec = field(default_factory=ParticleSpec)
    solver: JIDA = field(default_factory=lambda: JIDA(rtol=1e-8, atol=1e-10))

    def solve(self, params: Mapping[str, Any], conditions: Mapping[str, Any], times: Any):
        problem = self.spec.build()
        times = jnp.asarray(times)
        args = {"D": params["D"], "k": params["k"], "c_b": conditions["c_b"]}
        return pdesolve(problem, self.solver, (0.0, times[-1]), self.spec.initial_state(),
                        saveat=SaveAt(ts=times), args=args)

    def __call__(self, params: Mapping[str, Any], conditions: Mapping[str, Any],
                 times: Any) -> dict[str, jax.Array]:
        ys = self.solve(params, conditions, times).ys
        return {"uptake": self.spec.uptake(ys), "surface": ys[:, -1]}

    def steps(self, params: Mapping[str, Any], conditions: Mapping[str, Any],
              times: Any) -> jax.Array:
        return self.solve(params, conditions, times).stats["steps"]


def particle_experiments(model: ParticleModel | None = None, *, seed: int = 0,
                         noise: float = 0.01, times: Any = TIMES,
                         particles: Mapping[str, tuple[float, float]] | None = None,
                         solutions: tuple[float, ...] = SOLUTIONS,
                         truth: ParticleModel | None = None) -> tuple[Any, ...]:
    """Six experiments ``"A-1", "A-2", "B-1", ...`` with synthetic, noisy measurements.

    The experiments fit with ``model`` (default `ParticleModel()`). Their data come from
    ``truth`` (default: ``model``'s spec solved to ``rtol=1e-10``) at the true ``(D, k)`` of each
    particle (`PARTICLES`), plus Gaussian noise of standard deviation ``noise`` times the largest
    value of each observable (``numpy`` generator with ``seed``). The measurements carry that
    noise level, so fitted standard errors are absolute.
    """
    from ..inference import Experiment, Measurement

    model = ParticleModel() if model is None else model
    truth_model = truth if truth is not None else ParticleModel(
        model.spec, JIDA(linear=model.solver.linear, rtol=1e-10, atol=1e-12))
    particles = PARTICLES if particles is None else particles
    rng = np.random.default_rng(seed)
    times = np.asarray(times, dtype=np.float64)
    out = []
    for name, (D, k) in particles.items():
        for number, cb in enumerate(solutions, start=1):
            clean = truth_model({"D": D, "k": k}, {"c_b": cb}, times)
            measurements = []
            for key in ("uptake", "surface"):
                values = np.asarray(clean[key])
                sigma = noise * float(np.max(np.abs(values)))
                measurements.append(Measurement(times, values + sigma * rng.standard_normal(
                    times.size), noise=sigma, observable=key))
            out.append(Experiment(f"{name}-{number}", model, {"c_b": cb}, tuple(measurements)))
    return tuple(out)
