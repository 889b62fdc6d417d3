"""distributed.run under real launchers: our launcher, mpirun (OpenMPI) and srun (Slurm).

Each launch fits the same study as one process does and must agree to 1e-10 relative; the launch
also calls initialize() (each detection path with a real launcher), and every experiment's values
are loaded on the process that owns it, once.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from distkit import (
    FIT,
    MPIRUN,
    PYTHON,
    assert_same_fit,
    env,
    free_coordinator,
    launches,
    loads,
    mpi_ready,
    owner_of,
    read,
    run,
)
from testkit import PATIENCE, require

from schedulers.slurm import slurm_available

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The one-process fit (no launcher: initialize() and run() do nothing special)."""
    out = tmp_path_factory.mktemp("one")
    run([PYTHON, str(FIT), str(out), "--init", "--newton"])
    launch = launches(out)
    assert launch == {0: {"source": "none", "process_id": 0, "num_processes": 1,
                          "initialized": False, "jax_process_count": 1, "jax_process_index": 0}}
    assert set(loads(out).values()) == {"0"}
    return read(out / "fit.json")


def check(out: Path, reference: dict, source: str | None, processes: int) -> None:
    fit = read(out / "fit.json")
    assert_same_fit(fit["tr"], reference["tr"])
    if "newton" in fit:
        assert_same_fit(fit["newton"], reference["newton"])
    assert len(fit["assignment"]) == processes
    assert loads(out) == owner_of(fit["assignment"])
    if source is not None:
        got = launches(out)
        assert sorted(got) == list(range(processes))
        for rank, launch in got.items():
            assert launch == {"source": source, "process_id": rank, "num_processes": processes,
                              "initialized": True, "jax_process_count": processes,
                              "jax_process_index": rank}


def test_launcher_two_processes(reference, tmp_path):
    run([PYTHON, "-m", "solvers.distributed.launch", "-n", "2", str(FIT), str(tmp_path),
         "--init"])
    check(tmp_path, reference, "launcher", 2)


@pytest.mark.parametrize("processes", [2, 4])
def test_mpirun(reference, tmp_path, processes):
    require(mpi_ready(), "no mpirun or mpi4py (apt-get install openmpi-bin libopenmpi-dev; "
                         "pip install mpi4py)")
    command = MPIRUN + ["-n", str(processes)]
    flags = []
    if processes == 2:   # initialize() on an MPI launch, and the Newton fit, once
        command += ["-x", f"DIFFSOUP_COORDINATOR={free_coordinator()}"]
        flags = ["--init", "--newton"]
    run(command + [PYTHON, "-m", "mpi4py", str(FIT), str(tmp_path), *flags])
    check(tmp_path, reference, "mpi" if flags else None, processes)


def test_srun(reference, tmp_path):
    require(slurm_available(), "no Slurm answers (start it with scripts/slurm-start.sh)")
    # srun passes the environment on: the job's secret, exported as a user would
    run(["srun", "-n", "2", "--time=5", PYTHON, str(FIT), str(tmp_path), "--init"],
        env=env(secrets.token_hex(32)))
    check(tmp_path, reference, "slurm", 2)


def test_killed_worker_makes_process_zero_raise_worker_lost(tmp_path):
    """SIGKILL of process 1 mid-fit: process 0 (which waits for replies without a timeout) sees
    its connection end and raises WorkerLost, instead of waiting forever for the reply."""
    base = env(secrets.token_hex(32))
    base["DIFFSOUP_COORDINATOR"] = free_coordinator()
    base["DIFFSOUP_NUM_PROCESSES"] = "2"
    procs = []
    for rank in range(2):
        procs.append(subprocess.Popen([PYTHON, str(FIT), str(tmp_path), "--repeat"],
                                      env={**base, "DIFFSOUP_PROCESS_ID": str(rank)},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 200
        while not (tmp_path / "ready").exists():
            assert procs[0].poll() is None, procs[0].communicate()
            assert time.monotonic() < deadline, "the fit never started"
            time.sleep(0.1)
        worker = int((tmp_path / "pid.1").read_text())
        os.kill(worker, signal.SIGKILL)
        try:  # the limit only ends a hung test
            _, err = procs[0].communicate(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"process 0 still runs {PATIENCE:.0f} s after process 1 was killed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert procs[0].returncode not in (0, None)
    assert "WorkerLost: process 1 died" in err, err[-3000:]
