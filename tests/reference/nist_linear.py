"""The NIST StRD linear regression datasets (tests/reference/data/nist-linear/): their design
matrices, certified values, and the log relative error (LRE) that scores an estimate.

Used by test_nist_linear.py and benchmarks/lsq.py. The files are NIST's own, unchanged (public
domain); their README names the source and defines LRE.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "nist-linear"
#: NIST's order: lower difficulty, average, higher.
NAMES = ("Norris", "Pontius", "NoInt1", "NoInt2", "Filip", "Longley", "Wampler1", "Wampler2",
         "Wampler3", "Wampler4", "Wampler5")
#: LRE is capped at this many digits (the certified values carry 15).
MAX_DIGITS = 15.0

_PARAM = re.compile(r"^\s*B(\d+)\s+(\S+)\s+(\S+)\s*$")
_RESIDUAL_SD = re.compile(r"^\s*Standard Deviation\s+(\S+)\s*$")


@dataclass(frozen=True)
class Dataset:
    """One dataset: the model's design matrix ``A`` (intercept and powers of x as NIST's model
    says), the observations ``y``, and the certified coefficients, their standard deviations and
    the residual standard deviation."""

    name: str
    A: np.ndarray
    y: np.ndarray
    coefficients: np.ndarray
    standard_errors: np.ndarray
    residual_sd: float


def load(name: str, folder: str | os.PathLike[str] = DATA) -> Dataset:
    """The dataset ``name`` (e.g. ``"Filip"``) read from ``folder/<name>.dat``."""
    lines = (Path(folder) / f"{name}.dat").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Data:")
                 and i > 40) + 1  # the data table's header is line 60, the table line 61
    params, residual_sd = {}, None
    for line in lines[:start]:
        if m := _PARAM.match(line):
            params[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        elif (m := _RESIDUAL_SD.match(line)) and residual_sd is None:
            residual_sd = float(m.group(1))
    table = np.array([[float(v) for v in line.split()] for line in lines[start:] if line.split()])
    y, X = table[:, 0], table[:, 1:]
    order = sorted(params)
    if X.shape[1] == 1:  # a polynomial in x: the powers that NIST's model names
        A = np.column_stack([X[:, 0] ** p for p in order])
    else:  # Longley: an intercept and the predictors
        A = np.column_stack(([np.ones(len(y))] if 0 in params else []) + list(X.T))
    assert A.shape[1] == len(order), (name, A.shape, order)
    assert residual_sd is not None, f"{name}: no residual standard deviation in the file"
    return Dataset(name, A, y, np.array([params[p][0] for p in order]),
                   np.array([params[p][1] for p in order]), float(residual_sd))


def lre(estimate: np.ndarray | float, certified: np.ndarray | float) -> float:
    """Digits of agreement: the smallest over the entries of ``-log10(|e - c| / |c|)``
    (``-log10|e|`` where ``c`` is 0), capped at 15; 0 for non-finite estimates."""
    e = np.atleast_1d(np.asarray(estimate, dtype=float))
    c = np.atleast_1d(np.asarray(certified, dtype=float))
    if e.shape != c.shape or not np.all(np.isfinite(e)):
        return 0.0
    with np.errstate(divide="ignore"):
        err = np.where(c == 0, np.abs(e), np.abs(e - c) / np.where(c == 0, 1.0, np.abs(c)))
        digits = np.where(err == 0, MAX_DIGITS, -np.log10(np.where(err == 0, 1.0, err)))
    return float(np.clip(digits, 0.0, MAX_DIGITS).min())
