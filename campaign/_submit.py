"""Preparing a submission for array workers: plan the tasks once, then workers claim them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ._errors import CampaignError
from ._items import prepare_items
from ._ledger import Ledger
from ._plan import Plan, plan
from ._worker import write_task_list


@dataclass(frozen=True)
class Submission:
    """A planned submission: its id (the ledger run's id) and what the workers will run."""

    id: str
    ledger: Path
    plan: Plan


def prepare_submission(items: Iterable[Mapping[str, Any]], *, ledger_path: str | Path,
                       resume: bool = True) -> Submission:
    """Check the items, record the new tasks as pending (refusing changed items, keeping the
    accepted ones), and write the list of tasks for `campaign worker` to claim.

    Raises the same errors as `checkpointed_map` (bad items, a foreign ledger, a live driver).
    """
    prepared = prepare_items(items)
    ledger = Ledger(ledger_path)
    ledger.open(resume=resume, execution="array")
    try:
        planned = plan(ledger, prepared)
        write_task_list(ledger.path, ledger.run_id, [p.task_id for p in planned.to_run])
        ledger.set_run(submission=ledger.run_id, to_run=len(planned.to_run))
    except BaseException:
        ledger.close("crashed")
        raise
    ledger.close("submitted")
    return Submission(ledger.run_id, ledger.path, planned)


def record_job(ledger: Path, submission: str, job_id: str) -> None:
    """Note the Slurm job id of a submission in its run entry."""
    from ._document import update

    def mutate(doc: dict[str, Any]) -> None:
        for run in doc["runs"]:
            if run.get("id") == submission:
                run["job"] = job_id
                return
        raise CampaignError(f"ledger {ledger} has no run {submission!r}")

    update(ledger, mutate)
