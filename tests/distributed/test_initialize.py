"""initialize() and launcher detection without a launcher: the no-op, and the clear errors.

The detection paths with real launchers (ours, mpirun, srun) run in test_run.py.
"""

from __future__ import annotations

import pytest
from distkit import free_coordinator

from solvers.distributed import _initialize, initialize
from solvers.distributed._launch_info import Launch, detect, first_host, slurm_port

LAUNCH_VARS = ("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROCESSES", "DIFFSOUP_PROCESS_ID",
               "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK",
               "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID")


@pytest.fixture
def clean(monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_initialize, "_state", None)
    return monkeypatch


def test_without_launcher_or_arguments_nothing_happens(clean):
    launch = initialize()
    assert launch == Launch("none", None, 1, 0, initialized=False)
    assert not launch.multi


@pytest.mark.parametrize("kwargs, missing", [
    ({"coordinator_address": "node01:1234"}, "num_processes, process_id"),
    ({"num_processes": 2, "process_id": 1}, "coordinator_address"),
])
def test_some_arguments_name_what_is_missing_and_the_fix(clean, kwargs, missing):
    with pytest.raises(ValueError, match=f"but not {missing}; give coordinator_address="):
        initialize(**kwargs)


def test_unreachable_coordinator_is_an_error_naming_the_timeout(clean):
    address = free_coordinator()    # nothing listens there
    with pytest.raises(RuntimeError, match=rf"could not reach the coordinator {address} within "
                                           r"timeout=1 s .*raise initialize\(timeout=\.\.\.\)"):
        initialize(address, 2, 1, timeout=1)


def test_mpi_launch_without_coordinator_says_what_to_export(clean):
    clean.setenv("OMPI_COMM_WORLD_SIZE", "2")
    clean.setenv("OMPI_COMM_WORLD_RANK", "1")
    with pytest.raises(ValueError, match="export DIFFSOUP_COORDINATOR="):
        initialize()


def test_detection_of_each_launcher_from_its_variables():
    assert detect({}) == Launch("none", None, 1, 0)
    assert detect({"DIFFSOUP_COORDINATOR": "127.0.0.1:5000", "DIFFSOUP_NUM_PROCESSES": "3",
                   "DIFFSOUP_PROCESS_ID": "2"}) == Launch("launcher", "127.0.0.1:5000", 3, 2)
    slurm = {"SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3",
             "SLURM_STEP_NODELIST": "gpu[07-09,12]", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "1"}
    assert detect(slurm) == Launch("slurm", f"gpu07:{slurm_port('77', '1')}", 4, 3)
    assert detect({**slurm, "SLURM_STEP_NUM_TASKS": "1"}).source == "none"   # a batch step
    assert detect({"PMI_SIZE": "2", "PMI_RANK": "1", "DIFFSOUP_COORDINATOR": "h:9"}) == \
        Launch("mpi", "h:9", 2, 1)
    assert first_host("cpu1,cpu2") == "cpu1" and first_host("n[3-4]") == "n3"
    assert slurm_port("77", "1") != slurm_port("77", "2")
    with pytest.raises(ValueError, match="must be 'host:port'"):
        detect({"DIFFSOUP_COORDINATOR": "nohost", "DIFFSOUP_NUM_PROCESSES": "2",
                "DIFFSOUP_PROCESS_ID": "0"})


def test_a_second_call_with_the_same_settings_returns_the_same_launch(clean):
    first = initialize()
    assert initialize() is first and initialize("127.0.0.1:1234", 1, 0) is first
    address = free_coordinator()  # nothing listens there: joining again would time out
    joined = Launch("arguments", address, 2, 1, initialized=True)
    clean.setattr(_initialize, "_state", joined)
    assert initialize(address, 2, 1, timeout=1) is joined
    clean.setenv("DIFFSOUP_COORDINATOR", address)  # the same job, seen through our launcher
    clean.setenv("DIFFSOUP_NUM_PROCESSES", "2")
    clean.setenv("DIFFSOUP_PROCESS_ID", "1")
    assert initialize(timeout=1) is joined


@pytest.mark.parametrize("size, rank", [(2, 0), (3, 1)])
def test_a_second_call_for_another_job_is_a_clear_error(clean, size, rank):
    address = free_coordinator()
    clean.setattr(_initialize, "_state", Launch("arguments", address, 2, 1, initialized=True))
    with pytest.raises(RuntimeError, match=r"already called in this process .* cannot join "
                                           r"another job .* start a new process"):
        initialize(address, size, rank, timeout=1)
    clean.setattr(_initialize, "_state", None)
    initialize()  # one process, then a job of two: refused as well
    with pytest.raises(RuntimeError, match="already called in this process"):
        initialize(address, 2, 1, timeout=1)
