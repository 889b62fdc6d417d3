"""Job-array scripts, Slurm commands, job states and polling, against a real Slurm.

The rendered scripts are compared byte for byte with tests/schedulers/slurm/slurm_reference/*.sh.
After an intended change of `render_array_script`, rewrite them and review the diff:

    python tests/schedulers/slurm/test_slurm_script.py --regenerate
"""

from __future__ import annotations

import itertools
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

if __name__ == "__main__":  # run as a script: the project, then tests/ (testkit), come first
    sys.path[:0] = [str(Path(__file__).resolve().parents[i]) for i in (3, 2)]

import pytest
from testkit import PATIENCE, require

from schedulers.slurm import (
    Backoff,
    JobWatcher,
    SlurmCommandError,
    format_walltime,
    job_states,
    parse_walltime,
    poll_until,
    render_array_script,
    sbatch,
    scancel,
    slurm_available,
    slurm_memory_bytes,
)

REFERENCE = Path(__file__).parent / "slurm_reference"

#: The options matrix of the stored reference scripts.
CASES: dict[str, dict] = {
    "minimal": dict(job_name="fits", command=["campaign", "worker", "particles.json"],
                    array="0-3", log_dir="logs"),
    "everything": dict(
        job_name="fits-gpu", command=["campaign", "worker", "/scratch/me/fits/ledger.json"],
        array="0-99%10", log_dir="/scratch/me/fits/logs/", time="2-00:00:00",
        partition="gpu", account="proj42", cpus_per_task=4, mem="16G", gpus_per_task=1,
        signal_before_end=300, extra_directives=["--qos=long", "--constraint=a100"],
        prologue=["module load cuda/12.4", "source /opt/venvs/fits/bin/activate"],
        workdir="/scratch/me/fits"),
    "quoting": dict(job_name="q.1", array="1,3,5-9:2", log_dir="/var/log/campaign",
                    command=["/usr/bin/python3", "-m",
                             "campaign", "worker", "/data/my ledger.json", "--note", "it's $HOME"],
                    time=5400),
    "one_element_signal": dict(job_name="single", command=["campaign", "worker", "l.json"],
                               array="0", log_dir="logs", time="01:00:00",
                               signal_before_end=120),
}


def regenerate() -> None:
    REFERENCE.mkdir(exist_ok=True)
    for name, options in CASES.items():
        (REFERENCE / f"{name}.sh").write_text(render_array_script(**options), encoding="utf-8")
        print(f"wrote {REFERENCE / name}.sh")


# --------------------------------------------------------------------- the script (pure)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_script_matches_its_reference_byte_for_byte(name):
    expected = (REFERENCE / f"{name}.sh").read_bytes()
    assert render_array_script(**CASES[name]).encode() == expected, (
        "the script changed; if intended: "
        "python tests/schedulers/slurm/test_slurm_script.py --regenerate")


def test_no_reference_is_left_without_a_case():
    assert {p.stem for p in REFERENCE.glob("*.sh")} == set(CASES)


def test_the_command_runs_with_exec_and_usr1_goes_to_the_batch_shell():
    text = render_array_script(**CASES["everything"])
    assert text.endswith("\nexec campaign worker /scratch/me/fits/ledger.json\n")
    assert "#SBATCH --signal=B:USR1@300\n" in text
    assert "#SBATCH --output=/scratch/me/fits/logs/%A_%a.out\n" in text


@pytest.mark.parametrize("change, message", [
    (dict(array="0-"), "not a Slurm array range"),
    (dict(array="3-1"), "ends before it starts"),
    (dict(array="0-9%0"), "'%0' would run no element"),
    (dict(array="0-8:0"), "step"),
    (dict(array=4), "not a Slurm array range"),
    (dict(job_name="my job"), "not a usable job name"),
    (dict(command="campaign worker l.json"), "list of argv words"),
    (dict(command=[]), "list of argv words"),
    (dict(command=["campaign", 3]), "give strings"),
    (dict(log_dir="my logs"), "spaces or '%'"),
    (dict(log_dir="logs/%j"), "spaces or '%'"),
    (dict(time="1:2:3:4"), "not a Slurm time"),
    (dict(time=0), "must be positive"),
    (dict(mem="4 GB"), "not a Slurm memory size"),
    (dict(cpus_per_task=0), "cpus_per_task=0 must be an integer >= 1"),
    (dict(gpus_per_task=1.5), "gpus_per_task=1.5"),
    (dict(signal_before_end=70000), "more than Slurm's limit"),
    (dict(extra_directives=["qos=long"]), "not an sbatch option"),
    (dict(extra_directives="--qos=long"), "must be a list of strings"),
    (dict(prologue=["module load a\nmodule load b"]), "one non-empty line"),
    (dict(partition="a b"), "without spaces"),
])
def test_invalid_options_are_clear_errors(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        render_array_script(**{**CASES["minimal"], **change})


@pytest.mark.parametrize("text, seconds", [
    ("90", 5400), ("30:00", 1800), ("01:30:00", 5400), ("2-00:00:00", 172800),
    ("1-12", 129600), ("1-00:30", 88200), (600, 600),
])
def test_walltimes_in_every_slurm_form(text, seconds):
    assert parse_walltime(text) == seconds
    assert parse_walltime(format_walltime(seconds)) == seconds


@pytest.mark.parametrize("text, size", [
    ("500", 500 << 20), ("500M", 500 << 20), ("64K", 64 << 10), ("4G", 4 << 30), ("2T", 2 << 40),
])
def test_memory_sizes_in_slurms_units(text, size):
    assert slurm_memory_bytes(text) == size


@pytest.mark.parametrize("text", ["4GB", "lots", "", "1.5G", 4])
def test_a_memory_size_slurm_would_refuse_is_refused_with_the_value(text):
    with pytest.raises(ValueError, match=f"{text!r} is not a Slurm memory size"):
        slurm_memory_bytes(text)


def test_backoff_doubles_to_its_cap():
    assert list(itertools.islice(Backoff(), 8)) == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert list(itertools.islice(Backoff(1, factor=3, cap=10), 4)) == [1, 3, 9, 10]
    with pytest.raises(ValueError, match="first > 0"):
        Backoff(0)


def test_poll_until_backs_off_and_never_sleeps_past_its_deadline():
    now = [0.0]
    slept: list[float] = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    answers: Iterator[object] = iter([None, 0, {}, "done"])
    assert poll_until(lambda: next(answers), sleep=sleep, clock=lambda: now[0]) == "done"
    assert slept == [0.5, 1, 2]
    slept.clear()
    with pytest.raises(TimeoutError, match="still waiting after 10 s; last answer: False"):
        poll_until(lambda: False, timeout=10, sleep=sleep, clock=lambda: now[0])
    assert slept == [0.5, 1, 2, 4, 2.5]


# --------------------------------------------------------------------- a real Slurm
@pytest.fixture
def slurm():
    require(slurm_available(), "no Slurm answers (start it with scripts/slurm-start.sh)")


def wrap(command: str, tmp_path: Path) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), "--wrap",
                          command], capture_output=True, text=True, check=True).stdout
    return out.strip().split(";")[0]


ELEMENT = """
import os, sys, pathlib
i = os.environ["SLURM_ARRAY_TASK_ID"]
pathlib.Path(sys.argv[1], i).write_text(sys.argv[2] + "|" + os.environ["SLURM_ARRAY_JOB_ID"])
print("element", i, "pid", os.getpid())
"""


def test_a_four_element_array_runs_each_element_and_is_watched_with_few_polls(slurm, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "out").mkdir()
    script = render_array_script(
        job_name="test-array", array="0-3", log_dir=tmp_path / "logs", time="00:05:00",
        mem="100M", command=[sys.executable, "-c", ELEMENT, tmp_path / "out", "an 'odd' $word"])
    job = sbatch(script, cwd=tmp_path)
    first = job_states(job)
    assert set(first) == {f"{job}_{i}" for i in range(4)}, first
    watcher = JobWatcher(job)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    final = watcher.wait(timeout=PATIENCE, sleep=sleep)
    assert final == {f"{job}_{i}": "COMPLETED" for i in range(4)}
    # polled with back-off: one squeue call, then one after each delay of 0.5, 1, 2, 4 ... s
    assert slept == list(itertools.islice(Backoff(), len(slept)))
    assert watcher.polls == len(slept) + 1
    for i in range(4):
        assert (tmp_path / "out" / str(i)).read_text() == f"an 'odd' $word|{job}"
        assert f"element {i} pid" in (tmp_path / "logs" / f"{job}_{i}.out").read_text()
    assert job_states(f"{job}_2") == {f"{job}_2": "COMPLETED"}
    scancel(job)  # an array that has ended: not an error


def test_job_states_of_wrap_jobs_in_one_squeue_call(slurm, tmp_path):
    ok, bad, long = (wrap(c, tmp_path) for c in ("true", "exit 3", "sleep 600"))
    watcher = JobWatcher([ok, bad, long])
    states = watcher.wait(lambda s: s.get(ok) == "COMPLETED" and s.get(bad) == "FAILED"
                          and s.get(long) == "RUNNING", timeout=PATIENCE)
    assert set(states) == {ok, bad, long}
    scancel(long)
    states = JobWatcher(long).wait(timeout=PATIENCE)
    assert states == {long: "CANCELLED"}
    assert job_states("999999999") == {}  # unknown: absent, not an error
    assert job_states([]) == {}


def test_scancel_one_element_then_the_array(slurm, tmp_path):
    script = render_array_script(job_name="test-cancel", array="0-3", log_dir=tmp_path,
                                 command=["sleep", "600"], mem="50M")
    job = sbatch(script, cwd=tmp_path)
    watcher = JobWatcher(job, backoff=Backoff(0.2, cap=1))
    watcher.wait(lambda s: len(s) == 4 and set(s.values()) == {"RUNNING"}, timeout=PATIENCE)
    scancel(f"{job}_2")
    states = watcher.wait(lambda s: s[f"{job}_2"] == "CANCELLED", timeout=PATIENCE)
    assert [states[f"{job}_{i}"] for i in (0, 1, 3)] == ["RUNNING"] * 3
    scancel(job)
    states = watcher.wait(timeout=PATIENCE)
    assert set(states.values()) == {"CANCELLED"}


def test_a_failed_sbatch_shows_command_exit_code_and_stderr(slurm, tmp_path):
    script = render_array_script(**{**CASES["minimal"], "partition": "no-such-partition"})
    with pytest.raises(SlurmCommandError) as info:
        sbatch(script, cwd=tmp_path)
    err = info.value
    assert err.returncode not in (0, None) and err.command[0] == "sbatch"
    assert "invalid partition" in err.stderr.lower()
    text = str(err)
    assert "Command: sbatch --parsable" in text and f"exited with code {err.returncode}" in text
    assert "stderr:" in text and "no-such-partition" in text
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == text and again.stderr == err.stderr


TRAP = """
import os, signal, sys, time, pathlib
folder = pathlib.Path(sys.argv[1])
def on_usr1(signum, frame):
    (folder / ("usr1-" + os.environ["SLURM_ARRAY_TASK_ID"])).write_text(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGUSR1, on_usr1)
(folder / ("ready-" + os.environ["SLURM_ARRAY_TASK_ID"])).write_text(str(os.getpid()))
time.sleep(90)
"""


def test_scancel_signal_reaches_the_exec_command(slurm, tmp_path):
    script = render_array_script(job_name="test-usr1", array="0-1", log_dir=tmp_path,
                                 command=[sys.executable, "-c", TRAP, tmp_path], mem="100M")
    job = sbatch(script, cwd=tmp_path)
    poll_until(lambda: len(list(tmp_path.glob("ready-*"))) == 2, timeout=PATIENCE,
               backoff=Backoff(0.2, cap=1))
    scancel(job, signal="USR1")
    states = JobWatcher(job, backoff=Backoff(0.2, cap=1)).wait(timeout=PATIENCE)
    assert states == {f"{job}_0": "COMPLETED", f"{job}_1": "COMPLETED"}
    for i in (0, 1):  # the Python process that got USR1 is the one exec replaced the shell by
        assert (tmp_path / f"usr1-{i}").read_text() == (tmp_path / f"ready-{i}").read_text()


@pytest.mark.slow
def test_signal_before_end_arrives_before_the_walltime(slurm, tmp_path):
    # Slurm checks time limits every 30 s or so: with 59 s of a 60 s walltime, USR1 comes at
    # that check, within about 30 s of the start.
    script = render_array_script(job_name="test-signal", array="0", log_dir=tmp_path,
                                 time="00:01:00", signal_before_end=59, mem="100M",
                                 command=[sys.executable, "-c", TRAP, tmp_path])
    job = sbatch(script, cwd=tmp_path)
    states = JobWatcher(job, backoff=Backoff(1, cap=2)).wait(timeout=PATIENCE)
    # COMPLETED, by the signal's handler: a job still running at its walltime ends as TIMEOUT
    assert states == {f"{job}_0": "COMPLETED"}, "ended by the signal, not killed at walltime"
    assert (tmp_path / "usr1-0").read_text() == (tmp_path / "ready-0").read_text()


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: python {sys.argv[0]} --regenerate   (rewrites {REFERENCE}/*.sh)")
    regenerate()


@pytest.mark.parametrize(("array", "count"), [("0-31%8", 32), ("1,3,5", 3), ("0-15:4", 4),
                                              ("7", 1), ("0-3,10-11", 6)])
def test_array_elements_counts_the_elements_of_a_range(array, count):
    from schedulers.slurm import array_elements

    assert array_elements(array) == count


def test_array_elements_refuses_what_is_not_a_range():
    from schedulers.slurm import array_elements

    with pytest.raises(ValueError, match="not a Slurm array range"):
        array_elements("0-")
