"""Inference: experiments, parameters and data-parallel trust-region fits.

Fits want float64: call ``jax.config.update("jax_enable_x64", True)`` at start-up.
"""

from ._lower import LoweredProblem as LoweredProblem, lower as lower
from ._ode import ODEModel as ODEModel
from ._problem import (
    Experiment as Experiment,
    InferenceProblem as InferenceProblem,
    Measurement as Measurement,
    Parameter as Parameter,
    Study as Study,
)
from ._solution import OptResult as OptResult, Status as Status
from ._solve import optsolve as optsolve
from ._trust_region import (
    LevenbergMarquardt as LevenbergMarquardt,
    NewtonTrustRegion as NewtonTrustRegion,
    TrustRegion as TrustRegion,
)
