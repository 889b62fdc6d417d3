"""DAE and linear-solver tests: float64, set at import (before any JAX computation).

Nothing here starts a JAX backend at import, so tests/solvers can still ask for its emulated
devices when both folders run in one pytest run; nothing here depends on the device count.

Compile time dominates these tests (each solve, derivative and fit is one XLA program); on jax
0.10, XLA:CPU's legacy loop emitters compile them about twice as fast as the default fusion
emitters, so the flag is set for this pytest run (and the example's subprocess) before the backend
starts. Other JAX versions are left alone: XLA refuses flags it does not know.
"""

from __future__ import annotations

import os

import jax

jax.config.update("jax_enable_x64", True)

_FLAG = "--xla_cpu_use_fusion_emitters=false"
if jax.__version__.startswith("0.10.") and "xla_cpu_use_fusion_emitters" not in os.environ.get(
        "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()
