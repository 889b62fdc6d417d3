"""Slurm: job-array scripts and job states (for `campaign submit`), and execution="slurm".

Importing this package imports neither dask nor dask-jobqueue.
"""

from ._cluster import SlurmScheduler as SlurmScheduler
from ._cluster import default_prologue as default_prologue
from ._commands import ACTIVE_STATES as ACTIVE_STATES
from ._commands import ENDED_STATES as ENDED_STATES
from ._commands import SlurmCommandError as SlurmCommandError
from ._commands import job_states as job_states
from ._commands import release as release
from ._commands import sbatch as sbatch
from ._commands import scancel as scancel
from ._commands import slurm_available as slurm_available
from ._script import array_elements as array_elements
from ._script import format_walltime as format_walltime
from ._script import parse_walltime as parse_walltime
from ._script import render_array_script as render_array_script
from ._script import slurm_memory_bytes as slurm_memory_bytes
from ._watch import Backoff as Backoff
from ._watch import JobWatcher as JobWatcher
from ._watch import all_ended as all_ended
from ._watch import poll_until as poll_until
