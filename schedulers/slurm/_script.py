"""The sbatch script of a job array: one pure function of its options, and walltime parsing.

The script is tested byte for byte against the files in ``tests/schedulers/slurm/slurm_reference/``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

#: ``0-3``, ``0-15:4``, ``1,3,5``, ``0-99%10``: comma-separated indices or ranges (with an
#: optional step), then optionally ``%N``, at most N elements running at once.
_ARRAY = re.compile(
    r"(?P<parts>\d+(?:-\d+(?::\d+)?)?(?:,\d+(?:-\d+(?::\d+)?)?)*)(?:%(?P<max>\d+))?")
_RANGE = re.compile(r"(?P<lo>\d+)(?:-(?P<hi>\d+)(?::(?P<step>\d+))?)?")
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_MEMORY = re.compile(r"\d+[KMGT]?")
_SIGNAL_MAX = 65535  # Slurm's limit for the seconds of --signal


def render_array_script(
    *,
    job_name: str,
    command: Sequence[str | os.PathLike[str]],
    array: str,
    log_dir: str | os.PathLike[str],
    time: str | int | None = None,
    partition: str | None = None,
    account: str | None = None,
    cpus_per_task: int = 1,
    mem: str | None = None,
    gpus_per_task: int | None = None,
    signal_before_end: int | None = None,
    extra_directives: Sequence[str] = (),
    prologue: Sequence[str] = (),
    workdir: str | os.PathLike[str] | None = None,
) -> str:
    """The text of an sbatch script for a job array whose every element runs ``command``.

    Pure: it reads nothing and writes nothing; submit the text with `sbatch`.

    Args:
        job_name: the job's name (``--job-name``): letters, digits and ``_.+-``.
        command: the argv words every element runs, e.g. ``["campaign", "worker", "l.json"]``;
            each is shell-quoted. It is run with ``exec``, so that it replaces the batch shell
            and receives the signals Slurm sends to it (``signal_before_end``, ``scancel``).
            Each element finds its index in ``$SLURM_ARRAY_TASK_ID``.
        array: the element indices (``--array``): ``"0-3"``, ``"0-99%10"`` (at most 10 at
            once), ``"0-15:4"``, ``"1,3,5"``.
        log_dir: the folder of the logs, one per element, ``<log_dir>/<job id>_<index>.out``
            (stdout and stderr together). Slurm does not create it: it must exist.
        time: the walltime of each element (``--time``), in one of Slurm's forms
            (``"MM"``, ``"MM:SS"``, ``"HH:MM:SS"``, ``"D-HH"``, ``"D-HH:MM"``, ``"D-HH:MM:SS"``),
            or an int of seconds (Slurm rounds up to a minute). None: the partition's default.
        partition: the partition (``--partition``); None: the cluster's default.
        account: the account charged (``--account``).
        cpus_per_task: CPUs of each element (``--cpus-per-task``; one task per element).
        mem: memory of each element (``--mem``), e.g. ``"4G"`` or ``"500M"``.
        gpus_per_task: GPUs of each element (``--gpus-per-task``).
        signal_before_end: seconds before the walltime at which Slurm sends SIGUSR1 to the
            command (``--signal=B:USR1@<seconds>``); Slurm may send it up to a minute early.
        extra_directives: further sbatch options, each rendered as ``#SBATCH <option>``, e.g.
            ``"--qos=long"`` or ``"--constraint=a100"``.
        prologue: shell lines run before the command, e.g. ``"module load cuda"`` or
            ``"source /path/to/venv/bin/activate"``.
        workdir: the folder the elements run in (``--chdir``); relative log folders are
            relative to it. None: the folder sbatch is run from.

    Returns:
        the script, ending in a newline.

    Raises:
        ValueError: an option Slurm would refuse or misread, named with its value.
    """
    name = _check_job_name(job_name)
    words = _check_command(command)
    max_running = _check_array(array)
    directives = [f"--job-name={name}", f"--array={array}",
                  f"--output={_check_path('log_dir', log_dir)}/%A_%a.out", "--ntasks=1",
                  f"--cpus-per-task={_positive('cpus_per_task', cpus_per_task)}",
                  *_optional(time=time, partition=partition, account=account, mem=mem,
                             gpus_per_task=gpus_per_task, signal_before_end=signal_before_end,
                             workdir=workdir)]
    for extra in _lines("extra_directives", extra_directives):
        if not extra.startswith("-"):
            raise ValueError(f"extra_directives: {extra!r} is not an sbatch option; write it as "
                             "on the sbatch command line, e.g. '--qos=long'")
        directives.append(extra)

    lines = ["#!/bin/bash",
             f"# Job array of {_elements(array, max_running)}, written by diffsoup-campaign.",
             *(f"#SBATCH {d}" for d in directives),
             "",
             "set -e"]
    lines += _lines("prologue", prologue)
    lines.append(f"exec {shlex.join(words)}")
    return "\n".join(lines) + "\n"


#: The unit of a Slurm memory size without a suffix, and what each suffix multiplies by.
_MEMORY_UNITS = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def slurm_memory_bytes(text: str) -> int:
    """Bytes of a Slurm memory size (``--mem``): digits with K, M (the default), G or T, each
    1024 times the one before, as Slurm reads them (``"4G"`` is 4 GiB, ``"500"`` 500 MiB)."""
    if not isinstance(text, str) or not _MEMORY.fullmatch(text):
        raise ValueError(f"{text!r} is not a Slurm memory size; write e.g. '4G', '500M' or "
                         "'500' (MiB)")
    digits = text.rstrip("KMGT")
    return int(digits) * _MEMORY_UNITS[text[len(digits):]]


def parse_walltime(text: str | int) -> int:
    """Seconds in a Slurm time (``"MM"``, ``"MM:SS"``, ``"HH:MM:SS"``, ``"D-HH"``,
    ``"D-HH:MM"``, ``"D-HH:MM:SS"``); an int is taken as seconds. Raises `ValueError`."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"a walltime must be positive, got {text} seconds")
        return text
    bad = ValueError(f"walltime {text!r} is not a Slurm time; write e.g. '01:30:00' (1.5 h), "
                     "'2-00:00:00' (2 days), '90' (minutes) or '30:00' (minutes:seconds)")
    if not isinstance(text, str) or not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", text):
        raise bad
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        parts += [0] * (3 - len(parts))  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = parts
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0  # MM
    elif len(parts) == 2:
        h, m, s = 0, *parts  # MM:SS
    else:
        h, m, s = parts
    seconds = ((int(days or 0) * 24 + h) * 60 + m) * 60 + s
    if seconds <= 0:
        raise bad
    return seconds


def format_walltime(seconds: int) -> str:
    """``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day) for a number of seconds."""
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{h:02d}:{m:02d}:{s:02d}"


# ---------------------------------------------------------------------- checks
def _optional(*, time: str | int | None, partition: str | None, account: str | None,
              mem: str | None, gpus_per_task: int | None, signal_before_end: int | None,
              workdir: str | os.PathLike[str] | None) -> list[str]:
    """The directives of the options given (not None), each checked, in the script's order."""
    directives = []
    if time is not None:
        directives.append(f"--time={_check_time(time)}")
    if partition is not None:
        directives.append(f"--partition={_check_word('partition', partition)}")
    if account is not None:
        directives.append(f"--account={_check_word('account', account)}")
    if mem is not None:
        if not isinstance(mem, str) or not _MEMORY.fullmatch(mem):
            raise ValueError(f"mem={mem!r} is not a Slurm memory size; write e.g. '4G', "
                             "'500M' or '2048' (megabytes)")
        directives.append(f"--mem={mem}")
    if gpus_per_task is not None:
        directives.append(f"--gpus-per-task={_positive('gpus_per_task', gpus_per_task)}")
    if signal_before_end is not None:
        seconds = _positive("signal_before_end", signal_before_end)
        if seconds > _SIGNAL_MAX:
            raise ValueError(f"signal_before_end={seconds} is more than Slurm's limit of "
                             f"{_SIGNAL_MAX} seconds")
        directives.append(f"--signal=B:USR1@{seconds}")
    if workdir is not None:
        directives.append(f"--chdir={_check_path('workdir', workdir)}")
    return directives


def _check_job_name(name: str) -> str:
    if not isinstance(name, str) or not _JOB_NAME.fullmatch(name):
        raise ValueError(f"job_name={name!r} is not a usable job name; use letters, digits and "
                         "_.+- (e.g. 'campaign-fits')")
    return name


def _check_command(command: Sequence[str | os.PathLike[str]]) -> list[str]:
    if isinstance(command, (str, bytes)) or not command:
        raise ValueError(f"command={command!r} must be a non-empty list of argv words, e.g. "
                         "['campaign', 'worker', 'particles.json']")
    words = []
    for word in command:
        if not isinstance(word, (str, os.PathLike)):
            raise ValueError(f"command word {word!r} is a {type(word).__name__}; give strings")
        words.append(os.fspath(word))
    return words


def _check_array(array: str) -> int | None:
    """Validate ``array``; return its ``%N`` limit (None without one)."""
    match = _ARRAY.fullmatch(array) if isinstance(array, str) else None
    if match is None:
        raise ValueError(f"array={array!r} is not a Slurm array range; write e.g. '0-3' "
                         "(elements 0 to 3), '0-99%10' (at most 10 running at once), '0-15:4' "
                         "or '1,3,5'")
    for part in match["parts"].split(","):
        r = _range(part)
        if r["hi"] is not None and int(r["hi"]) < int(r["lo"]):
            raise ValueError(f"array={array!r}: the range {part!r} ends before it starts")
        if r["step"] is not None and int(r["step"]) == 0:
            raise ValueError(f"array={array!r}: the step of {part!r} must be at least 1")
    if match["max"] is not None and int(match["max"]) == 0:
        raise ValueError(f"array={array!r}: '%0' would run no element; write '%1' or more")
    return None if match["max"] is None else int(match["max"])


def _range(part: str) -> re.Match[str]:
    """One part of an array range that `_ARRAY` has matched (so this matches too)."""
    match = _RANGE.fullmatch(part)
    if match is None:
        raise ValueError(f"{part!r} is not an index or a range of indices")
    return match


def array_elements(array: str) -> int:
    """How many elements the Slurm array range ``array`` has: ``"0-31%8"`` has 32 (at most 8 of
    them running at once). Raises ValueError for what is not an array range."""
    _check_array(array)
    count = 0
    for part in array.split("%")[0].split(","):
        r = _range(part)
        lo, hi = int(r["lo"]), int(r["hi"] or r["lo"])
        count += len(range(lo, hi + 1, int(r["step"] or 1)))
    return count


def _elements(array: str, max_running: int | None) -> str:
    count = array_elements(array)
    text = f"{count} element{'s' if count != 1 else ''}"
    return text + (f", at most {max_running} at once" if max_running is not None else "")


def _check_time(time: str | int) -> str:
    if isinstance(time, str):
        parse_walltime(time)
        return time
    return format_walltime(parse_walltime(time))


def _check_word(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or re.search(r"\s", value):
        raise ValueError(f"{what}={value!r} must be a non-empty string without spaces")
    return value


def _check_path(what: str, value: str | os.PathLike[str]) -> str:
    text = os.fspath(value)
    if not text or re.search(r"\s", text) or "%" in text:
        raise ValueError(
            f"{what}={text!r}: an sbatch directive cannot hold a path that is empty or has "
            "spaces or '%'; choose a folder without them")
    return text.rstrip("/") or "/"


def _positive(what: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what}={value!r} must be an integer >= 1")
    return value


def _lines(what: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise ValueError(f"{what} must be a list of strings, got the string {values!r}; "
                         f"write {what}=[{values!r}]")
    out = []
    for value in values:
        if not isinstance(value, str) or "\n" in value or not value.strip():
            raise ValueError(f"{what}: {value!r} must be one non-empty line of text")
        out.append(value)
    return out
