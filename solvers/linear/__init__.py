"""Linear-solver backends behind one interface: analyse (pattern), factor, refactor, solve.

``Dense`` (LU, any platform), ``KLU`` (CPU sparse LU through the XLA FFI) and ``CuDSS`` (the GPU
name, reserved). `linear_solver` turns ``"auto" | "dense" | "klu" | "cudss"`` into a backend.
"""

from ._base import FACTOR as FACTOR
from ._base import KEEP as KEEP
from ._base import REFACTOR as REFACTOR
from ._base import LinearSolver as LinearSolver
from ._cudss import CuDSS as CuDSS
from ._cudss import cudss_available as cudss_available
from ._dense import Dense as Dense
from ._klu import KLU as KLU
from ._klu import klu_available as klu_available
from ._pattern import Pattern as Pattern
from ._select import BACKENDS as BACKENDS
from ._select import linear_solver as linear_solver
