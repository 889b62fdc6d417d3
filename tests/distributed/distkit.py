"""What the multi-process tests share: launching the fit script and reading what it wrote."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from testkit import PYTHON, ROOT, child_env

from solvers.distributed.launch import free_port_pair

HERE = Path(__file__).resolve().parent
FIT = HERE / "fit_script.py"
#: Running as root needs OpenMPI's consent; several ranks on 2 cores need --oversubscribe.
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root"]


def env(secret: str | None = None) -> dict[str, str]:
    """A child's environment without any launcher's variables; ``secret``: its DIFFSOUP_SECRET."""
    out = child_env()
    for name in list(out):   # a test run under a launcher must not leak it into the children
        if name.startswith(("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROC", "DIFFSOUP_PROCESS_ID",
                            "DIFFSOUP_SECRET", "OMPI_", "PMI_", "SLURM_")):
            del out[name]
    out["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    if secret is not None:
        out["DIFFSOUP_SECRET"] = secret
    return out


def free_coordinator() -> str:
    return f"127.0.0.1:{free_port_pair()}"


def mpi_ready() -> bool:
    if shutil.which("mpirun") is None:
        return False
    done = subprocess.run([PYTHON, "-c", "import mpi4py"], capture_output=True, check=False)
    return done.returncode == 0


def run(command: list[str], timeout: float = 240, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=ROOT, env=kwargs.pop("env", env()), capture_output=True,
                          text=True, timeout=timeout, check=False, **kwargs)
    assert done.returncode == 0, (f"{command} exited {done.returncode}\n--- stdout\n"
                                  f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    return done


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def launches(out: Path) -> dict[int, dict]:
    found = {}
    for p in out.glob("launch.*.json"):
        found[int(p.name.split(".")[1])] = read(p)
    return found


def loads(out: Path) -> dict[str, str]:
    """Experiment id -> the rank that loaded its values (each loaded exactly once)."""
    seen: dict[str, list[str]] = {}
    for p in (out / "loads").iterdir():
        eid, rank = p.name.split(".")
        seen.setdefault(eid, []).append(rank)
    assert all(len(v) == 1 for v in seen.values()), seen
    return {k: v[0] for k, v in seen.items()}


def assert_same_fit(fit: dict, reference: dict, rtol: float = 1e-10) -> None:
    assert fit["converged"] and reference["converged"]
    for name, ref in reference["values"].items():
        assert abs(fit["values"][name] - ref) <= rtol * abs(ref), (name, fit["values"][name], ref)
    assert abs(fit["cost"] - reference["cost"]) <= rtol * reference["cost"]


def owner_of(assignment: list[list[str]]) -> dict[str, str]:
    return {eid: str(rank) for rank, ids in enumerate(assignment) for eid in ids}


__all__ = ["FIT", "MPIRUN", "PYTHON", "assert_same_fit", "env", "free_coordinator", "launches",
           "loads", "mpi_ready", "owner_of", "read", "run"]
