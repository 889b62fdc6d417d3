"""Job arrays: planning a submission (`_plan`), submitting it to Slurm (`_submit`), the work
folder's layout, fragments and their merge (`_workdir`), task leases (`_leases`) against the file
server's clock (`_skew`), and what each element runs (`_worker`)."""
