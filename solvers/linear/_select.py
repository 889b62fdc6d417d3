"""``linear="auto" | "dense" | "klu" | "cudss"`` (or a backend instance) to a backend."""

from __future__ import annotations

import logging

import jax

from ._base import LinearSolver, x64_enabled
from ._cudss import CuDSS, cudss_available
from ._dense import Dense
from ._klu import KLU, klu_available

__all__ = ["BACKENDS", "linear_solver"]

logger = logging.getLogger(__name__)

#: The backends by name.
BACKENDS: dict[str, type[LinearSolver]] = {"dense": Dense, "klu": KLU, "cudss": CuDSS}


def linear_solver(linear: str | LinearSolver = "auto") -> LinearSolver:
    """The backend for ``linear``.

    ``"auto"`` asks what is available: cuDSS on a GPU (`cudss_available`); KLU on a CPU when the
    ``klujax`` wheel is installed and float64 is enabled; otherwise dense LU (logged).

    Raises:
        ValueError: for an unknown name (the message lists the valid ones).
    """
    if isinstance(linear, LinearSolver):
        return linear
    if not isinstance(linear, str) or (linear != "auto" and linear not in BACKENDS):
        raise ValueError(f"unknown linear solver {linear!r}; use one of 'auto', "
                         f"{', '.join(repr(k) for k in BACKENDS)} or a LinearSolver instance")
    if linear != "auto":
        return BACKENDS[linear]()
    platform = jax.default_backend()
    if platform == "cpu":
        if klu_available() and x64_enabled():
            return KLU()
        logger.info("linear='auto' on CPU: %s; using dense LU",
                    "float64 is off (KLU needs jax_enable_x64)" if klu_available() else
                    "the klujax wheel (KLU) is not installed")
        return Dense()
    if cudss_available():
        return CuDSS()
    logger.info("linear='auto' on %s: the cuDSS backend is not built here; using dense LU",
                platform)
    return Dense()
