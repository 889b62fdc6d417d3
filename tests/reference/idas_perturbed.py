"""IDAS's own idasRoberts_FSA_dns (``-sensi stg t``) from ``y1(0) = 1 + f`` (``f`` from 1e-15
to 1e-10, either sign, a change the printed digits cannot see; ``f = 0`` is the example as
published), its values written with ten digits: how far IDAS's digits at each printed time move
when nothing but rounding changes (test_idas_sensitivity_error_control.py). The outputs are
stored in data/idas/fsa_perturbed.txt; rerun this file where SUNDIALS' development files are
installed (Debian's libsundials-dev, 6.4.1 wrote them; its examples include the source):

    python tests/reference/idas_perturbed.py

The example's source is changed in two places only: ``y1(0)`` is ``1 + f`` (``f`` from the
environment's ``Y1_SHIFT``, 0 when unset) and the state and sensitivity rows print ``%.10e``
instead of ``%12.4e``. With ``f = 0`` the build reproduces the published output to the digit
(the test checks that against data/idas/idasRoberts_FSA_dns_-sensi_stg_t.out).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "idas" / "fsa_perturbed.txt"
SOURCE = Path("/usr/share/doc/libsundials-dev/examples/idas/serial/idasRoberts_FSA_dns.c")
#: the shifts of y1(0), the published example's first
SHIFTS = (0.0,) + tuple(s * m for m in (1e-15, 2e-15, 5e-15, 1e-14, 2e-14, 5e-14, 1e-13, 1e-12,
                                        1e-11, 1e-10) for s in (1.0, -1.0))
LIBS = ["-lsundials_idas", "-lsundials_nvecserial", "-lsundials_sunlinsoldense",
        "-lsundials_sunmatrixdense", "-lm"]


def _patched(source: str) -> str:
    y1 = "  Ith(y,1) = ONE;"
    if source.count(y1) != 1 or "%12.4e %12.4e %12.4e" not in source:
        raise RuntimeError(f"{SOURCE} is not the idasRoberts_FSA_dns.c this script knows: "
                           f"it lacks {y1!r} or its %12.4e rows")
    source = source.replace(y1, "  Ith(y,1) = ONE + (getenv(\"Y1_SHIFT\") ? "
                                "atof(getenv(\"Y1_SHIFT\")) : ZERO);")
    return "#include <stdlib.h>\n" + source.replace("%12.4e %12.4e %12.4e", "%.10e %.10e %.10e")


def _rows(text: str) -> list[tuple[float, int, np.ndarray]]:
    """``(t, nst, 12 values: y then the three sensitivities)`` of each printed time."""
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines):
        parts = line.split()
        if len(parts) == 4 and lines[i + 1].split()[:1] == ["Solution"]:
            values = [float(v) for v in lines[i + 1].split()[1:]]
            for j in range(3):
                values += [float(v) for v in lines[i + 2 + j].split()[2:]]
            rows.append((float(parts[0]), int(parts[3]), np.array(values)))
    return rows


def write() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        c, exe = Path(tmp) / "fsa.c", Path(tmp) / "fsa"
        c.write_text(_patched(SOURCE.read_text()))
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(c), *LIBS], check=True)
        out = ["# y1_shift t nst y1 y2 y3 s1(y1 y2 y3) s2(...) s3(...): IDAS "
               "idasRoberts_FSA_dns -sensi stg t, tests/reference/idas_perturbed.py"]
        for f in SHIFTS:
            env = dict(os.environ, Y1_SHIFT=repr(f))
            text = subprocess.run([str(exe), "-sensi", "stg", "t"], env=env, cwd=tmp, check=True,
                                  capture_output=True, text=True).stdout
            rows = _rows(text)
            assert len(rows) == 12, (f, len(rows))
            for t, nst, values in rows:
                out.append(f"{f!r} {t:.1e} {nst} " + " ".join(f"{v:.10e}" for v in values))
    DATA.write_text("\n".join(out) + "\n")


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(shifts (R,), steps (R, 12), y (R, 12, 3), dy/dp (R, 12, 3 parameters, 3 unknowns))``,
    the runs in the order of `SHIFTS`."""
    rows = [line.split() for line in DATA.read_text().splitlines() if not line.startswith("#")]
    shifts = np.array([float(r[0]) for r in rows[::12]])
    steps = np.array([int(r[2]) for r in rows]).reshape(len(shifts), 12)
    values = np.array([[float(v) for v in r[3:]] for r in rows]).reshape(len(shifts), 12, 12)
    return shifts, steps, values[..., :3], values[..., 3:].reshape(len(shifts), 12, 3, 3)


if __name__ == "__main__":
    write()
    shifts, steps, _, _ = load()
    print(f"wrote {DATA}: {len(shifts)} runs, steps {steps[:, -1].min()}-{steps[:, -1].max()}",
          file=sys.stderr)
