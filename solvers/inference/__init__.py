"""Inference: experiments, parameters and data-parallel trust-region fits.

Fits want float64: call ``jax.config.update("jax_enable_x64", True)`` at start-up.
"""

from ._lower import LoweredProblem as LoweredProblem
from ._lower import lower as lower
from ._ode import ODEModel as ODEModel
from ._problem import (
    Experiment as Experiment,
)
from ._problem import (
    InferenceProblem as InferenceProblem,
)
from ._problem import (
    Measurement as Measurement,
)
from ._problem import (
    Parameter as Parameter,
)
from ._problem import (
    Study as Study,
)
from ._solution import OptResult as OptResult
from ._solution import Status as Status
from ._solve import optsolve as optsolve
from ._trust_region import (
    LevenbergMarquardt as LevenbergMarquardt,
)
from ._trust_region import (
    NewtonTrustRegion as NewtonTrustRegion,
)
from ._trust_region import (
    TrustRegion as TrustRegion,
)
