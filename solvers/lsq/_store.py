"""`BlockStore`: the folder of row blocks, the task that fills it, and the system read from it."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._block import BlockRef, pack, read_block, write_atomic
from ._errors import BlockError
from ._system import BlockSystem

logger = logging.getLogger(__name__)

#: A rows function: called with the item (a mapping), it returns ``(A, y, weights)`` or
#: ``(A, y, weights, groups)``.
RowsFn = Callable[[Any], tuple]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class BlockStore:
    """A folder of row blocks of one least-squares system, one ``.npy`` file per task.

    Args:
        path: the folder, a ``str`` or any ``os.PathLike`` (created when the first block is
            written); put it beside the campaign ledger, e.g. ``"fit.json.blocks"``, on a file
            system the workers share.
        group_names: names of the row groups that rows functions return as integer codes
            (``("energy", "force")`` for codes 0 and 1); residual statistics are reported per
            name. Without it, groups are named by their code (``"0"``, ``"1"``).
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 group_names: Sequence[str] | None = None):
        self.path = Path(path).resolve()
        self.group_names = None if group_names is None else tuple(str(g) for g in group_names)

    def __repr__(self) -> str:
        return f"BlockStore({str(self.path)!r})"

    def task(self, rows: RowsFn) -> BlockTask:
        """The function to give `checkpointed_map`: item -> ``{"rows", "cols", "sha256",
        "file", "task_id"}``, after writing the item's block to this store.

        ``rows(item)`` returns ``(A, y, weights)`` or ``(A, y, weights, groups)``: ``A`` of shape
        (rows, cols), ``y`` of shape (rows,), ``weights`` a number or shape (rows,) (the
        objective is ``sum weights * (A x - y)**2``), ``groups`` integer codes per row (e.g. 0 for
        energy rows, 1 for force rows). Picklable when ``rows`` is (a module-level function).
        """
        if not callable(rows):
            raise TypeError(f"rows must be a function item -> (A, y, weights), got {rows!r}")
        return BlockTask(str(self.path), rows)

    def file_for(self, task_id: str) -> str:
        """The file name of a task's block: its id made file-safe, plus a hash of the id."""
        digest = hashlib.sha256(task_id.encode()).hexdigest()[:10]
        return f"{_UNSAFE.sub('_', task_id)[:80]}-{digest}.npy"

    def refs(self, source: Any) -> list[BlockRef]:
        """The blocks recorded in ``source`` (see `system`), in order."""
        return [self._ref(tid, res) for tid, res in _results(source)]

    def system(self, source: Any, *, verify: str = "once") -> BlockSystem:
        """The least-squares system of the blocks recorded in ``source``, read lazily.

        Args:
            source: what `checkpointed_map` returned (a ``Campaign``; it must be complete),
                its ``records`` (task id -> record), or a list of the tasks' result dicts.
            verify: ``"once"`` checks each block's SHA-256 the first time this process reads it
                (and again if the file changed on disk since), ``"always"`` on every read,
                ``"never"`` not at all.

        Raises:
            BlockError: a result names no block of this store, or the blocks' column counts
                differ.
            ValueError: the campaign is incomplete (its failures are listed).
        """
        refs = self.refs(source)
        if not refs:
            raise ValueError(f"no blocks recorded in {source!r}: run the assembly first")
        cols = {r.cols for r in refs}
        if len(cols) > 1:
            first = refs[0]
            odd = next(r for r in refs if r.cols != first.cols)
            raise BlockError(
                f"blocks have different column counts: task {first.task_id!r} has {first.cols}, "
                f"task {odd.task_id!r} has {odd.cols}; every rows function call must return the "
                "same number of columns", odd.task_id)
        ledger = getattr(source, "ledger_path", None)
        return BlockSystem(refs, verify=verify, group_names=self.group_names,
                           ledger=None if ledger is None else str(ledger))

    def verify(self, source: Any) -> list[str | None]:
        """The task ids whose block file is missing or damaged (every byte is read); ``None``
        for a block given as a result without a ``task_id``.

        Forget them all at once (``campaign forget LEDGER ID...``) and run the assembly again.
        """
        bad: list[str | None] = []
        for ref in self.refs(source):
            try:
                read_block(ref, verify=True)
            except BlockError as exc:
                logger.warning("%s", exc)
                bad.append(ref.task_id)
        return bad

    def _ref(self, task_id: str | None, result: Mapping[str, Any]) -> BlockRef:
        try:
            name, rows, cols, sha = (result["file"], result["rows"], result["cols"],
                                     result["sha256"])
        except (KeyError, TypeError):
            raise BlockError(
                f"the result of task {task_id!r} is not a block record ({result!r}); give "
                "system() the campaign of a BlockStore.task", task_id) from None
        return BlockRef(task_id if task_id is not None else result.get("task_id"),
                        str(self.path / name), int(rows), int(cols), str(sha))


def _results(source: Any) -> Iterable[tuple[str | None, Mapping[str, Any]]]:
    """(task id, result) pairs of a Campaign, a records mapping or a list of results."""
    if hasattr(source, "records") and hasattr(source, "task_ids"):
        if not getattr(source, "complete", True):
            failures = "; ".join(str(f) for f in getattr(source, "failures", ())[:5])
            raise ValueError(
                f"the assembly is incomplete ({len(source.results)} of {len(source.task_ids)} "
                f"blocks accepted; {failures or 'some tasks did not run'}); run it again until "
                "every block is accepted, or pass the results you want to use")
        source = source.records
    if isinstance(source, Mapping):
        out = []
        for tid, rec in source.items():
            if rec.get("status") != "accepted":
                raise ValueError(f"task {tid!r} is {rec.get('status')!r}, not accepted: run the "
                                 "assembly again until every block is accepted")
            out.append((tid, rec["result"]))
        return out
    return [(None, r) for r in source]


@dataclass(frozen=True)
class BlockTask:
    """Computes one item's row block, stores it atomically and returns its record.

    Calling it again for the same item replaces the file by an identical one.
    """

    folder: str
    rows: RowsFn

    def __call__(self, item: Mapping[str, Any]) -> dict[str, Any]:
        task_id = str(item.get("task_id", ""))
        if not task_id:
            raise ValueError(f"the item has no task_id: {dict(item)!r}")
        A, y, w, groups = _checked(self.rows(item), task_id)
        data = pack(A, y, w, groups)
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        name = BlockStore(folder).file_for(task_id)
        write_atomic(folder / name, data)
        return {"rows": A.shape[0], "cols": A.shape[1], "sha256": hashlib.sha256(data).hexdigest(),
                "file": name, "task_id": task_id}


def _checked(out: Any, task_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(out, tuple) or len(out) not in (3, 4):
        raise TypeError(f"rows() of task {task_id!r} returned {type(out).__name__}; return a "
                        "tuple (A, y, weights) or (A, y, weights, groups)")
    A = np.asarray(out[0], dtype=np.float64)
    y = np.asarray(out[1], dtype=np.float64)
    if A.ndim != 2 or y.shape != (A.shape[0],):
        raise ValueError(f"rows() of task {task_id!r} returned A of shape {A.shape} and y of "
                         f"shape {y.shape}; A must be (rows, cols) and y (rows,)")
    w = np.broadcast_to(np.asarray(out[2], dtype=np.float64), y.shape)
    groups = np.zeros(y.shape) if len(out) == 3 else np.asarray(out[3])
    if (groups.shape != y.shape or not np.all(np.mod(groups, 1) == 0) or np.any(groups < 0)
            or np.any(groups >= 256)):
        raise ValueError(f"rows() of task {task_id!r} returned groups {groups!r}; give one "
                         f"integer code from 0 to 255 per row ({y.shape[0]} rows)")
    for name, value in (("A", A), ("y", y), ("weights", w)):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"rows() of task {task_id!r} returned non-finite values in {name} "
                             f"(first at index {np.argwhere(~np.isfinite(value))[0].tolist()})")
    if np.any(w < 0):
        raise ValueError(f"rows() of task {task_id!r} returned negative weights "
                         f"(min {w.min()!r}); weights multiply squared residuals: use w >= 0")
    return A, y, w, groups.astype(np.float64)


__all__ = ["BlockStore", "BlockTask"]
