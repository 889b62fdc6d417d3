"""`BlockSystem`: a least-squares system kept as row blocks on disk, read one block at a time."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

from ._block import Block, BlockRef, read_block

VERIFY_MODES = ("once", "always", "never")


class BlockSystem:
    """The rows ``A x ~ y`` (weights ``w``) of many blocks; no block is read before it is used.

    Made by `BlockStore.system`. ``len(system)`` is the number of blocks; iterating yields
    `Block`s, each checked against its recorded SHA-256 as ``verify`` says.
    """

    def __init__(self, refs: Sequence[BlockRef], *, verify: str = "once",
                 group_names: Sequence[str] | None = None, ledger: str | None = None):
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
        self.refs = tuple(refs)
        self.verify = verify
        self.group_names = None if group_names is None else tuple(group_names)
        self.ledger = ledger
        self._verified: dict[str, tuple[int, int]] = {}

    @property
    def shape(self) -> tuple[int, int]:
        """(total rows, columns)."""
        return sum(r.rows for r in self.refs), self.refs[0].cols

    @property
    def nbytes(self) -> int:
        """Bytes of the whole design matrix ``A`` in float64 (what no solver ever holds)."""
        rows, cols = self.shape
        return rows * cols * 8

    def __len__(self) -> int:
        return len(self.refs)

    def __repr__(self) -> str:
        rows, cols = self.shape
        return f"<BlockSystem {rows} x {cols} in {len(self)} blocks, {self.nbytes / 1e6:.1f} MB>"

    def group_name(self, code: int) -> str:
        """The name of a row-group code (the code itself when the store has no names)."""
        if self.group_names is not None and 0 <= code < len(self.group_names):
            return self.group_names[code]
        return str(code)

    def read(self, ref: BlockRef) -> Block:
        """One block, its checksum checked as ``verify`` says."""
        if self.verify == "never":
            return read_block(ref, verify=False, ledger=self.ledger)
        if self.verify == "once":
            try:
                st = os.stat(ref.path)
                stamp = (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                stamp = None
            if stamp is not None and self._verified.get(ref.path) == stamp:
                return read_block(ref, verify=False, ledger=self.ledger)
            block = read_block(ref, verify=True, ledger=self.ledger)
            if stamp is not None:
                self._verified[ref.path] = stamp
            return block
        return read_block(ref, verify=True, ledger=self.ledger)

    def __iter__(self) -> Iterator[Block]:
        for ref in self.refs:
            yield self.read(ref)

    def split(self, task_ids: Iterable[str]) -> tuple[BlockSystem, BlockSystem]:
        """(the other blocks, the blocks of ``task_ids``): a training and a held-out system."""
        held = set(task_ids)
        unknown = held - {r.task_id for r in self.refs}
        if unknown:
            raise ValueError(f"no blocks for task ids {sorted(unknown)!r}; the system has "
                             f"{len(self)} blocks (e.g. {self.refs[0].task_id!r})")
        keep = [r for r in self.refs if r.task_id not in held]
        out = [r for r in self.refs if r.task_id in held]
        if not keep:
            raise ValueError("split() would leave no block to fit")
        return self._with(keep), self._with(out)

    def _with(self, refs: Sequence[BlockRef]) -> BlockSystem:
        new = BlockSystem(refs, verify=self.verify, group_names=self.group_names,
                          ledger=self.ledger)
        new._verified = self._verified
        return new
