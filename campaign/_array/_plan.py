"""Preparing a submission for array workers: plan the tasks once, then workers claim them.

`plan_submission` plans in memory and writes nothing, so that a submission whose job could not
be submitted leaves no trace; `PlannedSubmission.record` then writes it (the new tasks pending,
the list of tasks for `campaign worker`, the run entry with its job id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._items import PreparedItems, prepare_items
from .._ledger import _document
from .._ledger._busy import check_free
from .._ledger._driver import Ledger
from .._ledger._status import RunStatus
from .._plan import Plan, compare, plan
from ._shares import share_size, write_shares
from ._workdir import forget_state, overlay, write_task_list


@dataclass(frozen=True)
class Submission:
    """A planned submission: its id (the ledger run's id) and what the workers will run."""

    id: str
    ledger: Path
    plan: Plan


@dataclass
class PlannedSubmission:
    """A submission planned in memory: nothing is written until `record`.

    ``id`` is the id the run will have in the ledger (give it to the workers); ``plan`` is what
    the ledger holds now implies (`record` plans again under the driver's lock).
    """

    id: str
    ledger: Path
    plan: Plan
    resume: bool
    prepared: PreparedItems = field(repr=False)
    _driver: Ledger = field(repr=False)

    def record(self, job: str | None = None, requested: dict[str, int] | None = None,
               elements: int | None = None) -> Submission:
        """Write the submission: the new tasks pending (changed items refused, accepted tasks
        kept), the task list the workers claim from (cut into shares for ``elements`` workers,
        `campaign._array._shares.share_size`, each share's records in a file of its own,
        `write_shares`), and a ``submitted`` run (with ``job``, and ``requested``: what each
        element asked Slurm for, `Scheduler.requested`'s form).

        Raises `DriverBusyError` when a driver or array workers took the ledger meanwhile.
        """
        ledger = self._driver
        forgets = forget_state(ledger.path)  # before the records are read: see write_shares
        ledger.open(resume=self.resume, execution="array")
        try:
            planned = plan(ledger, self.prepared)
            ids = [p.task_id for p in planned.to_run]
            write_shares(ledger.path, ledger.run_id, ids, share_size(len(ids), elements),
                         ledger.tasks, forgets)
            write_task_list(ledger.path, ledger.run_id, ids)
            fields: dict[str, Any] = {"submission": ledger.run_id, "to_run": len(planned.to_run)}
            if job is not None:
                fields["job"] = job
            if requested:
                fields["requested"] = dict(requested)
            ledger.set_run(**fields)
        except BaseException:
            ledger.close(RunStatus.CRASHED)
            raise
        ledger.close(RunStatus.SUBMITTED)
        return Submission(ledger.run_id, ledger.path, planned)


def plan_submission(items: Iterable[Mapping[str, Any]], *, ledger_path: str | Path,
                    resume: bool = True, ignore_fields: Iterable[str] = ()) -> PlannedSubmission:
    """Check the items and plan them against the ledger as it is, writing nothing: no file or
    folder is created, so a submission that goes no further leaves no trace.

    Raises the same errors as `checkpointed_map` (bad items, a foreign ledger, a live driver,
    array workers holding tasks). ``ignore_fields``: as `checkpointed_map`'s.
    """
    prepared = prepare_items(items, ignore_fields)
    driver = Ledger(ledger_path)
    path = driver.path
    check_free(driver.paths)
    tasks: dict[str, dict[str, Any]] = {}
    if resume and path.exists():
        tasks = overlay(_document.read(path), path)["tasks"]
    elif path.exists():
        _document.read(path)  # a foreign ledger is refused, even when it would be replaced
    planned, _ = compare(tasks, prepared)
    return PlannedSubmission(driver.run_id, path, planned, resume, prepared, driver)
