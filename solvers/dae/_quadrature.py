"""`Quadrature`: integrals ``Q(t) = int_{t0}^t q(s, y, y', args) ds`` computed with a solve, as
IDAS's quadratures (``IDAQuadInit``, ``IDASetQuadErrCon``, ``IDAQuadSStolerances``).

The stepper carries ``Q``'s own modified divided differences beside the state's, on the same
steps and orders: each step predicts ``Q`` and ``Q'`` with the state's coefficients and, once
the state's corrector has converged, sets ``Q' = q(t_n, y_n, y'_n)``, i.e. the correction
``(q - Q'_pred) / c`` (IDAS's ``IDAQuadNls``: no iteration, ``q`` does not depend on ``Q``).
Left out of the error test (the default, as IDAS's), ``Q`` leaves the steps unchanged; with
``error_control=True`` each of the error test's estimates is the larger of the state's and
``Q``'s weighted norms (IDAS's ``IDAQuadWrmsNormUpdate``), so ``Q``'s error also sets the steps.
``Q`` is differentiated with the state: its tangents are those of the same steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Quadrature"]


@dataclass(frozen=True)
class Quadrature:
    """An integrand for `pdesolve(..., quadrature=Quadrature(q))` (a bare ``q`` is the same).

    Attributes:
        q: ``q(t, y, yp, args) -> (k,)`` array, traceable by JAX; `Solution.qs` holds
            ``int_{t0}^t q`` at the save times, ``(m, k)``.
        error_control: put ``Q`` into the local error test (IDAS's ``IDASetQuadErrCon``;
            default ``False``, as IDAS's: ``Q`` then follows the state's steps and costs one
            evaluation of ``q`` per step).
        rtol, atol: ``Q``'s tolerances in the error test (IDAS's ``IDAQuadSStolerances``);
            ``None`` takes the solver's ``rtol``, and its ``atol`` when that is a scalar (a
            per-unknown ``atol`` needs ``atol=`` here). Used only with ``error_control``.

    Quadratures with equal fields (the same ``q`` object) share compiled solves.
    """

    q: Callable[..., Any]
    error_control: bool = False
    rtol: float | None = None
    atol: float | Sequence[float] | None = None

    def __post_init__(self) -> None:
        if not callable(self.q):
            raise TypeError(f"Quadrature(q) needs a callable q(t, y, yp, args) -> (k,) array, "
                            f"got {type(self.q).__name__}")
        if not isinstance(self.error_control, (bool, np.bool_)):
            raise TypeError(f"Quadrature(error_control=...) takes True or False, got "
                            f"{self.error_control!r}")
        object.__setattr__(self, "error_control", bool(self.error_control))
        if self.rtol is not None and not (isinstance(self.rtol, (int, float))
                                          and math.isfinite(self.rtol) and self.rtol >= 0):
            raise ValueError(f"Quadrature(rtol=...) must be None or a finite number >= 0, got "
                             f"{self.rtol!r}")
        if self.atol is not None:
            a = np.asarray(self.atol, dtype=float)
            if a.ndim > 1 or a.size == 0 or not (np.all(np.isfinite(a)) and np.all(a >= 0)):
                raise ValueError(f"Quadrature(atol=...) takes None, a number >= 0 or one per "
                                 f"component of q, got {self.atol!r}")
            value = float(a) if a.ndim == 0 else tuple(float(v) for v in a)
            object.__setattr__(self, "atol", value)

    @classmethod
    def of(cls, value: Any) -> Quadrature | None:
        """``value`` as a `Quadrature` (``None`` stays ``None``; a callable is wrapped)."""
        if value is None or isinstance(value, Quadrature):
            return value
        if callable(value):
            return cls(value)
        raise TypeError(f"quadrature must be Quadrature(q) or a callable q(t, y, yp, args) -> "
                        f"(k,) array, got {value!r}")

    def evaluate(self, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any) -> jax.Array:
        """``q`` at ``(t, y, y')`` as a 1-D array of ``y``'s dtype."""
        out = jnp.asarray(self.q(t, y, yp, args))
        if out.ndim != 1 or out.shape[0] == 0:
            raise ValueError(f"Quadrature q returned shape {out.shape}; it must return a "
                             f"non-empty 1-D array, one entry per integral")
        if isinstance(self.atol, tuple) and len(self.atol) != out.shape[0]:
            raise ValueError(f"Quadrature(atol=...) has {len(self.atol)} entries but q returns "
                             f"{out.shape[0]}; give one per component of q (or a scalar)")
        return out.astype(y.dtype)

    def tolerances(self, rtol: float, atol: Any) -> tuple[float, Any]:
        """``(rtol, atol)`` of ``Q``'s error weights given the solver's (``JIDA.atol``: a number
        or a tuple)."""
        r = rtol if self.rtol is None else float(self.rtol)
        if self.atol is not None:
            return r, self.atol
        if isinstance(atol, tuple):
            raise ValueError("Quadrature(error_control=True) with a per-unknown JIDA atol needs "
                             "its own atol: Quadrature(q, error_control=True, atol=1e-6) (a "
                             "number, or one per component of q)")
        return r, atol
