"""The ledger: its format, its readers and writers, its locks and leases, and the files beside it
(docs/ledger.md, "Code map")."""
