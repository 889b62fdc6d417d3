"""NIST StRD nonlinear regression datasets: reading the .dat files, the models, LRE.

The files in data/nist-nonlinear/ are NIST's (public domain, U.S. Government work), as
distributed at https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml and copied from the
NIST_STRD/ folder of lmfit-py (commit fe389bbbd1fe936cd73742bd81fc6fce7ac92858), unchanged.
Each holds two starting points, the certified parameters and their certified standard
deviations, the residual sum of squares, and the data (y, x).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "nist-nonlinear"


def _lanczos(b, x):
    return b[0] * jnp.exp(-b[1] * x) + b[2] * jnp.exp(-b[3] * x) + b[4] * jnp.exp(-b[5] * x)


def _rational_cubic(b, x):
    return ((b[0] + b[1] * x + b[2] * x**2 + b[3] * x**3)
            / (1.0 + b[4] * x + b[5] * x**2 + b[6] * x**3))


#: The model of each dataset, as its file states it: ``f(b, x)`` with ``b`` = (b1, b2, ...).
MODELS = {
    "MGH09": lambda b, x: b[0] * (x**2 + x * b[1]) / (x**2 + x * b[2] + b[3]),
    "MGH10": lambda b, x: b[0] * jnp.exp(b[1] / (x + b[2])),
    "Thurber": _rational_cubic,
    "BoxBOD": lambda b, x: b[0] * (1.0 - jnp.exp(-b[1] * x)),
    "Rat42": lambda b, x: b[0] / (1.0 + jnp.exp(b[1] - b[2] * x)),
    "Rat43": lambda b, x: b[0] / (1.0 + jnp.exp(b[1] - b[2] * x)) ** (1.0 / b[3]),
    "Eckerle4": lambda b, x: (b[0] / b[1]) * jnp.exp(-0.5 * ((x - b[2]) / b[1]) ** 2),
    "Bennett5": lambda b, x: b[0] * (b[1] + x) ** (-1.0 / b[2]),
    "Lanczos1": _lanczos,
    "Lanczos2": _lanczos,
    "Lanczos3": _lanczos,
    "Misra1a": lambda b, x: b[0] * (1.0 - jnp.exp(-b[1] * x)),
    "Kirby2": lambda b, x: (b[0] + b[1] * x + b[2] * x**2) / (1.0 + b[3] * x + b[4] * x**2),
    "Hahn1": _rational_cubic,
}


@dataclass(frozen=True)
class Dataset:
    name: str
    starts: tuple[tuple[float, ...], tuple[float, ...]]
    certified: tuple[float, ...]
    certified_sd: tuple[float, ...]
    residual_ss: float
    x: np.ndarray
    y: np.ndarray


_NUMBER = r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?"


def load(name: str) -> Dataset:
    """Read ``data/nist-nonlinear/<name>.dat``."""
    lines = (DATA / f"{name}.dat").read_text().splitlines()
    params = []
    for line in lines:
        m = re.match(rf"\s*b\d+\s*=\s*({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s*$",
                     line)
        if m:
            params.append(tuple(float(v) for v in m.groups()))
    rss = next(float(re.findall(_NUMBER, line)[-1]) for line in lines
               if line.strip().startswith("Residual Sum of Squares"))
    start = next(i for i, line in enumerate(lines) if re.match(r"\s*Data:\s+y\s+x", line))
    rows = [[float(v) for v in line.split()] for line in lines[start + 1:] if line.strip()]
    y, x = np.asarray(rows).T
    p = np.asarray(params)
    return Dataset(name, (tuple(p[:, 0]), tuple(p[:, 1])), tuple(p[:, 2]), tuple(p[:, 3]),
                   rss, x, y)


def lre(estimate: float, certified: float) -> float:
    """Log relative error: the number of agreeing digits, capped at 15."""
    if estimate == certified:
        return 15.0
    if not math.isfinite(estimate):
        return 0.0
    err = abs(estimate - certified) / (abs(certified) if certified != 0 else 1.0)
    return max(0.0, min(15.0, -math.log10(err)))


def fit_model(name: str, k: int):
    """The model of dataset ``name`` (``k`` parameters ``b1``..``bk``) as an
    `solvers.inference.Experiment` takes it: ``model(params, conditions, times)`` with the
    predictor in ``conditions["x"]``."""
    f = MODELS[name]

    def model(params, conditions, times):
        return f([params[f"b{i + 1}"] for i in range(k)], conditions["x"])

    model.__name__ = name
    return model
