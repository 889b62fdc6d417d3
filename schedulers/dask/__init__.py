"""The dask backend: `DaskScheduler` (`_scheduler`), its embedded cluster (`_cluster`), the
batches that run on the workers (`_batch`) and the check of the driver script (`_main`)."""

from ._scheduler import DaskScheduler as DaskScheduler
