"""The array worker's names by their earlier module: campaign/_array_worker.py (the claim loop)
and campaign/_workdir.py (the submission's task list) own them now."""

from ._array_worker import WorkerSummary as WorkerSummary
from ._array_worker import run_worker as run_worker
from ._array_worker import slurm_owner as slurm_owner
from ._workdir import task_list_path as task_list_path
from ._workdir import write_task_list as write_task_list

__all__ = ["WorkerSummary", "run_worker", "slurm_owner", "task_list_path", "write_task_list"]
