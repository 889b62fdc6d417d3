"""Index-1 DAEs ``F(t, y, y', args) = 0``: `pdesolve` with `JIDA` (IDA-style BDF), `SaveAt`,
`DAEProblem`, `Roots` (root functions), `Quadrature` (integrals), and the three-particle model
of the examples."""

from ._jacobian import check_jacobian as check_jacobian
from ._jacobian import jacobian_entries as jacobian_entries
from ._jida import JIDA as JIDA
from ._particles import (
    PARTICLES as PARTICLES,
)
from ._particles import (
    SOLUTIONS as SOLUTIONS,
)
from ._particles import (
    TIMES as TIMES,
)
from ._particles import (
    ParticleModel as ParticleModel,
)
from ._particles import (
    ParticleSpec as ParticleSpec,
)
from ._particles import (
    particle_experiments as particle_experiments,
)
from ._pdesolve import pdesolve as pdesolve
from ._problem import DAEProblem as DAEProblem
from ._quadrature import Quadrature as Quadrature
from ._roots import Roots as Roots
from ._solution import SaveAt as SaveAt
from ._solution import Solution as Solution
from ._solution import Status as Status
