"""The processes backend: `ProcessesScheduler` (`_scheduler`) and its worker processes: how they
start and die (`_child`), the loop each runs (`_worker`), their messages (`_messages`), groups of
them (`_group`), which gets which task (`_dispatch`, `_selector`), what a death or a timeout does
(`_failures`), and the monitor's scheduling class (`_thread_policy`).

Nothing is imported here: each worker process imports `_worker` alone, on the critical path of
every campaign on processes."""
