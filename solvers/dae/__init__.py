"""Index-1 DAEs ``F(t, y, y', args) = 0``: `pdesolve` with `JIDA` (IDA-style BDF), `SaveAt`,
`DAEProblem`, and the three-particle model of the examples."""

from ._jida import JIDA as JIDA
from ._particles import (
    PARTICLES as PARTICLES,
    SOLUTIONS as SOLUTIONS,
    TIMES as TIMES,
    ParticleModel as ParticleModel,
    ParticleSpec as ParticleSpec,
    particle_experiments as particle_experiments,
)
from ._pdesolve import pdesolve as pdesolve
from ._problem import DAEProblem as DAEProblem
from ._solution import SaveAt as SaveAt, Solution as Solution, Status as Status
