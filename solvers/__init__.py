"""The JAX solver core: device meshes and layouts, inference (data-parallel fits), sparse linear
solvers and the implicit DAE stepper.

``import solvers as ds`` gives the names of the solver pages: ``ds.global_mesh``, ``ds.Layout``,
``ds.mesh_groups``, ``ds.lower``, ``ds.pdesolve``, ``ds.JIDA``, ``ds.SaveAt``, ``ds.DAEProblem``,
``ds.Roots``, ``ds.Quadrature``,
``ds.inference.*``, ``ds.dae.*``, ``ds.linear.*``, ``ds.distributed.*`` (several processes) and
``ds.lsq.*`` (linear least squares over row blocks that no process holds whole).
Fits want float64: ``jax.config.update("jax_enable_x64", True)``. `campaign` and `schedulers`
never import this.
"""

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version

try:
    __version__ = _version("diffsoup-campaign")
except _NotInstalled:  # run from a source tree that was never installed
    __version__ = "0+unknown"

from . import dae as dae
from . import distributed as distributed
from . import inference as inference
from . import linear as linear
from . import lsq as lsq
from ._mesh import Layout as Layout
from ._mesh import global_mesh as global_mesh
from ._mesh import mesh_groups as mesh_groups
from .dae import (
    JIDA as JIDA,
)
from .dae import (
    DAEProblem as DAEProblem,
)
from .dae import (
    Quadrature as Quadrature,
)
from .dae import (
    Roots as Roots,
)
from .dae import (
    SaveAt as SaveAt,
)
from .dae import (
    Solution as Solution,
)
from .dae import (
    pdesolve as pdesolve,
)
from .inference import lower as lower
