"""Solver tests: 8 emulated CPU devices and float64, set when this file is imported.

pytest imports this file during collection, before any test runs, so the settings hold when the
whole suite runs in one process. (Setting them after a JAX backend has started is impossible: a
test module that runs JAX code at import, collected before this directory, would break that.)
"""

from __future__ import annotations

import jax

try:
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError as exc:
    if jax.device_count() < 8:
        raise RuntimeError(
            "tests/solvers needs 8 emulated CPU devices, but a JAX backend with "
            f"{jax.device_count()} started before tests/solvers/conftest.py ran; run with "
            "XLA_FLAGS=--xla_force_host_platform_device_count=8") from exc
jax.config.update("jax_enable_x64", True)
