"""The JAX solver core: device meshes and layouts, and inference (data-parallel fits).

``import solvers as ds`` gives the names of the solver pages: ``ds.global_mesh``, ``ds.Layout``,
``ds.mesh_groups``, ``ds.lower`` and ``ds.inference.*``. Fits want float64:
``jax.config.update("jax_enable_x64", True)``. `campaign` and `schedulers` never import this.
"""

from . import inference as inference
from ._mesh import Layout as Layout, global_mesh as global_mesh, mesh_groups as mesh_groups
from .inference import lower as lower
