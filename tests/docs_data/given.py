"""What a page leaves to its reader, for tests/test_docs_blocks.py's ``given`` markers: a
user's ``fit`` (importable by name, so that workers on other hosts import it from here: the
default job prologue puts this folder on their PYTHONPATH) and its ``items``; a ``study`` to
fit (made when first asked for, so that ``fit`` never imports JAX) and ``save`` for its result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def fit(item):
    """A fit of one item: a flat dict of plain values."""
    return {"D": 0.5 * item["temperature"], "converged": True}


items = [{"task_id": f"T{t}", "temperature": t} for t in (300, 310, 320, 330)]


def save(result: Any) -> None:
    """Write a fit's values to result.json in the working folder."""
    Path("result.json").write_text(json.dumps({n: float(result[n]) for n in result.names}))


def _decay(params, conditions, times):
    import jax.numpy as jnp
    return jnp.exp(-(params["k"] + params["D"] * conditions["q"] ** 2) * times)


def _study():
    import numpy as np

    from solvers import inference
    times = np.linspace(0.0, 2.0, 10)
    experiments = [inference.Experiment(f"q{q}", _decay, {"q": q}, inference.Measurement(
        times, np.exp(-(0.3 + 0.5 * q**2) * times), noise=0.01)) for q in (0.5, 1.0, 1.5)]
    return inference.InferenceProblem(experiments, parameters=(
        inference.Parameter("D", 1.0, lower=0.0, log=True), inference.Parameter("k", 1.0)))


def __getattr__(name: str) -> Any:
    if name == "study":
        return _study()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
