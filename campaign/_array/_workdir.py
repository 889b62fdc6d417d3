"""The folder ``<ledger>.work/`` of array workers: its layout, fragment files and their merge.

Beside the ledger ``L``, ``L.work/`` holds what all submissions share and one folder
``<submission>/`` per submission (docs/ledger.md, "Array workers"):

- ``leases/<key>.json`` (shared): who runs a task now (campaign/_array/_leases.py).
- ``latest/<key>.json`` (shared): the newest record a worker wrote for the task, so that the next
  worker to claim it continues its attempts and history (only a record of the same item:
  fingerprint).
- ``accepted/<key>`` (shared): accepted, holding the item's fingerprint; no submission claims
  the task again for that item.
- ``forgets.json`` (shared): changed by every ``campaign forget`` (`forgetting`), so that a
  worker whose view of the ledger predates a forget reads it again (`forget_state`).
- ``<submission>/tasks.json``: the task ids the submission's workers claim from.
- ``<submission>/shares.json``, ``<submission>/items/`` and ``<submission>/shares/``: the size
  of the shares the task list is cut into, each share's records as the submission read them,
  and each share's lease and end mark (campaign/_array/_shares.py, campaign/_array/_view.py).
- ``merging/`` and ``merged.json`` (shared): the merge turn of ending workers, and the duration
  of the last merge between tasks (campaign/_array/_merging.py).
- ``<submission>/done/<key>``: the task ended (accepted or failed) in this submission: nobody
  claims it again in it.
- ``<submission>/lost/<key>``: how many times this submission lost the task (its worker died
  holding it).
- ``<submission>/fragments/<time>-<owner>-<n>.json``: the records a worker wrote, each file
  written atomically. `merge_fragments` applies them to the ledger under its lock; a fragment is
  deleted only once a later merge finds the ledger already holds its records, so a merge lost to
  a broken lock (NFS) delays a record but never loses it.

``<key>`` is the SHA-1 of the task id (task ids may hold any character). `forget_traces` removes
every file of a task (``campaign forget``).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from .._errors import LedgerError
from .._ledger import _ownership, _update
from .._ledger._atomic import HOST, atomic_write
from .._ledger._paths import WORK, LedgerPaths
from .._ledger._records import from_fragment, is_folded
from .._ledger._status import ACCEPTED


def task_key(task_id: str) -> str:
    """The name a task's files have under ``<ledger>.work/``: the SHA-1 of its id."""
    return hashlib.sha1(task_id.encode()).hexdigest()


def ledger_of(path: Path) -> Path:
    """The ledger whose ``<ledger>.work/`` holds ``path``."""
    for folder in path.parents:
        if folder.name.endswith(WORK):
            return folder.with_name(folder.name.removesuffix(WORK))
    raise ValueError(f"{path} is not under a ledger's .work/ folder")


def read_json(path: Path) -> Any:
    """A small JSON file of ``<ledger>.work/``, or None if it is gone or being written.
    Raises `LedgerError` if it is not the ledger owner's (`campaign._ledger._ownership`)."""
    try:
        return _ownership.read_json(path, ledger_of(path))
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None


def checked_root(ledger: Path) -> Path | None:
    """``<ledger>.work/`` once checked to be the ledger owner's (`campaign._ledger._ownership`), or
    None where it does not exist."""
    root = LedgerPaths.of(ledger).work
    return root if _ownership.check_folder(root, ledger_of(root / "x")) else None


#: What a submission id may hold (`campaign submit` makes 12 hexadecimal digits).
SUBMISSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_submission_id(submission: str) -> None:
    """Raise `LedgerError` unless ``submission`` is a submission id: 1 to 64 letters, digits,
    ``_`` or ``-`` (never a path such as ``../x``, whose files no merge would find)."""
    if not isinstance(submission, str) or not SUBMISSION_ID.fullmatch(submission):
        raise LedgerError(
            f"submission id {submission!r} is not valid: an id is 1 to 64 letters, digits, '_' "
            "or '-' (`campaign submit` prints it, `campaign status` shows it as 'submission')")


def task_list_path(ledger: Path, submission: str) -> Path:
    """The list of task ids that the workers of a submission claim from."""
    return LedgerPaths.of(ledger).work / submission / "tasks.json"


def write_task_list(ledger: Path, submission: str, task_ids: list[str],
                    share_size: int | None = None) -> None:
    """The submission's task list, and first its share size (``shares.json``,
    campaign/_array/_shares.py) when given: a worker that finds the list finds the size."""
    path = task_list_path(ledger, submission)
    _ownership.make_folder(path.parent, ledger)
    if share_size is not None:
        atomic_write(path.with_name("shares.json"), orjson.dumps({"size": share_size}))
    atomic_write(path, orjson.dumps(task_ids))


class WorkDir:
    """The folder of one submission (one `campaign submit`) and the shared ones beside it."""

    def __init__(self, ledger: Path, submission: str):
        check_submission_id(submission)
        self.ledger = Path(ledger)
        self.submission = submission
        root = LedgerPaths.of(self.ledger).work
        self.root = root / submission
        self.leases = root / "leases"  # shared: one holder across submissions
        self.done = self.root / "done"
        self.latest = root / "latest"
        self.accepted = root / "accepted"
        self.fragments = self.root / "fragments"
        for folder in (root, self.leases, self.done, self.accepted, self.latest, self.fragments):
            _ownership.make_folder(folder, self.ledger)  # 0700, or checked: the owner's only
        self._seq = 0
        self._planned: Mapping[str, Mapping[str, Any]] = {}

    def expect(self, tasks: Mapping[str, Mapping[str, Any]]) -> None:
        """The records the worker plans from (task id -> record, as the ledger holds them): an
        accepted mark or a ``latest/`` record counts only for the item of the same fingerprint."""
        self._planned = tasks

    def _fingerprint(self, task_id: str) -> str | None:
        rec = self._planned.get(task_id)
        return None if rec is None else rec["fingerprint"]

    # ------------------------------------------------------------------ done marks
    def is_done(self, task_id: str) -> bool:
        """Ended in this submission, or accepted in any (another may run beside it) for the
        planned item (`expect`)."""
        return self._is_done(task_key(task_id), task_id)

    def _is_done(self, key: str, task_id: str) -> bool:
        # os.path on strings: half the cost of Path's, paid for every task a worker passes
        return os.path.exists(f"{self.done}/{key}") or self._accepted(key, task_id)

    def _accepted(self, key: str, task_id: str) -> bool:
        """An accepted mark of the planned item: it holds the item's fingerprint (empty: a
        mark written before marks held it, taken as the planned item's)."""
        try:
            mark = _ownership.read_bytes(Path(f"{self.accepted}/{key}"), self.ledger)
        except FileNotFoundError:
            return False
        want = self._fingerprint(task_id)
        return not mark or want is None or mark.decode(errors="replace") == want

    def mark_done(self, task_id: str, *, accepted: bool) -> None:
        """The task ended in this submission (accepted: in every submission, for its item's
        fingerprint)."""
        key = task_key(task_id)
        if accepted:
            fingerprint = self._fingerprint(task_id)
            if fingerprint is None:
                (self.accepted / key).touch(mode=0o644)  # never group-writable by a umask
            else:
                atomic_write(self.accepted / key, fingerprint.encode(), durable=False)
        (self.done / key).touch(mode=0o644)

    def lost(self, task_id: str) -> int:
        """How many times this submission lost the task (its array worker died holding it)."""
        try:
            return int(_ownership.read_json(self.root / "lost" / task_key(task_id), self.ledger))
        except (FileNotFoundError, orjson.JSONDecodeError, TypeError, ValueError):
            return 0

    def set_lost(self, task_id: str, lost: int) -> None:
        folder = self.root / "lost"
        _ownership.make_folder(folder, self.ledger)
        atomic_write(folder / task_key(task_id), orjson.dumps(lost))

    # ------------------------------------------------------------------ records
    def write_fragment(self, records: dict[str, dict[str, Any]], owner: dict[str, Any]) -> Path:
        """Write records as a new fragment file (atomically); returns its path."""
        self._seq += 1
        name = (f"{time.time_ns():020d}-{owner.get('worker') or HOST}-{os.getpid()}-"
                f"{self._seq}-{uuid.uuid4().hex[:6]}.json")
        path = self.fragments / name.replace("/", "_")
        atomic_write(path, orjson.dumps({"owner": owner, "records": records}))
        for task_id, rec in records.items():  # the newest record, for the next claimer
            if rec.get("superseded"):  # the taker's records are newer
                continue
            atomic_write(self.latest / f"{task_key(task_id)}.json", orjson.dumps(rec),
                         durable=False)
        return path

    def newest(self, task_id: str, known: dict[str, Any]) -> dict[str, Any]:
        """The newest record of a task: ``known``, or what a worker wrote for it since, if
        that is a record of the same item (fingerprint): a record of an item that has since
        changed (forgotten, then planned anew) is never continued."""
        rec = read_json(self.latest / f"{task_key(task_id)}.json")
        if (isinstance(rec, dict) and rec.get("fingerprint") == known["fingerprint"]
                and rec["attempts"] >= known["attempts"]):
            return rec
        return known


def fragment_files(ledger: Path) -> list[Path]:
    """Every fragment of every submission of this ledger, oldest first."""
    root = checked_root(ledger)
    if root is None:
        return []
    return sorted(root.glob("*/fragments/*.json"), key=lambda p: p.name)


def load_fragment(path: Path) -> dict[str, dict[str, Any]] | None:
    """The records of a fragment file, or None if it is gone or not (yet) whole."""
    try:
        return _ownership.read_json(path, ledger_of(path))["records"]
    except (FileNotFoundError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def _reflected(tasks: dict[str, dict[str, Any]], task_id: str, rec: dict[str, Any]) -> bool:
    have = tasks.get(task_id)
    if have is None:
        return False
    if rec.get("superseded") and have["fingerprint"] == rec.get("fingerprint"):
        return is_folded(have, rec)  # a run past a taken-over lease: kept in the history too
    if have["status"] == ACCEPTED or have["fingerprint"] != rec.get("fingerprint"):
        return True  # final, or a record of another item (never applied): nothing to keep
    return (have["attempts"], have["status"], have["ended"]) == (
        rec["attempts"], rec["status"], rec["ended"])


def absorb_fragments(doc: dict[str, Any], ledger: Path) -> list[Path]:
    """Apply every fragment to ``doc`` in place; return the fragments that were already in it
    (safe to delete once ``doc`` is written).

    Fragments that hold a superseded attempt (`campaign._ledger._records.superseded`) come
    last, after every other fragment: such an attempt is folded into the task's newest record,
    and the fragments' names order them by their writers' clocks, which may differ (a taker
    whose clock runs ahead names its records later than the superseded run's, though it wrote
    them first). Each fragment is checked against ``doc`` just before it would be applied."""
    tasks = doc["tasks"]
    settled: list[Path] = []
    folds = [path for path in fragment_files(ledger) if _absorb(tasks, path, settled, last=False)]
    for path in folds:  # read again (rare): the others are never held all at once
        _absorb(tasks, path, settled, last=True)
    return settled


def _absorb(tasks: dict[str, Any], path: Path, settled: list[Path], *, last: bool) -> bool:
    """Apply one fragment to ``tasks`` (noting it in ``settled`` when they reflect it already);
    True where it holds a superseded attempt and ``last`` is False: it is left for later."""
    records = load_fragment(path)
    if records is None:
        return False
    if superseding(records) and not last:
        return True
    if all(_reflected(tasks, tid, rec) for tid, rec in records.items()):
        settled.append(path)
        return False
    for tid, rec in records.items():
        applied = from_fragment(tasks.get(tid), rec)
        if applied is not None:
            tasks[tid] = applied
    return False


def superseding(records: dict[str, dict[str, Any]]) -> bool:
    """Whether a fragment's records hold a superseded attempt (applied after the others:
    `absorb_fragments`)."""
    return any(rec.get("superseded") for rec in records.values())


def merge_fragments(ledger: Path) -> int:
    """Merge the fragments into the ledger under its lock; returns how many were applied."""
    pending = fragment_files(ledger)
    if not pending:
        return 0
    settled: list[Path] = []

    def mutate(doc: dict[str, Any]) -> None:
        settled.extend(absorb_fragments(doc, ledger))

    _update.update(ledger, mutate)
    for path in settled:
        path.unlink(missing_ok=True)
    return len(pending) - len(settled)


def overlay(doc: dict[str, Any], ledger: Path) -> dict[str, Any]:
    """The ledger as it will be once its fragments are merged (read-only; nothing written)."""
    absorb_fragments(doc, ledger)
    return doc


# ---------------------------------------------------------------------- forget
def forgets_path(ledger: Path) -> Path:
    """``<ledger>.work/forgets.json``: changed by every ``campaign forget`` (`forgetting`)."""
    return LedgerPaths.of(ledger).work / "forgets.json"


def forget_state(ledger: Path) -> bytes | None:
    """The bytes of ``forgets.json`` (None: no forget ever ran). A worker notes them before it
    reads the ledger; when they differ later, or said a forget was under way, a forget may
    have removed a task after the worker read it, and the worker reads the ledger again under
    its lock (`campaign._array._worker`)."""
    try:
        return _ownership.read_bytes(forgets_path(ledger), ledger)
    except FileNotFoundError:
        return None


def forgetting(ledger: Path, *, busy: bool) -> None:
    """Note in ``forgets.json`` that a forget begins (``busy``) or has written the ledger; under
    the ledger's lock. Only where ``<ledger>.work/`` exists (no worker without it)."""
    root = LedgerPaths.of(ledger).work
    if root.is_dir():
        atomic_write(forgets_path(ledger), orjson.dumps(
            {"busy": busy, "token": secrets.token_hex(8), "at": time.time()}))


#: How `forgetting` begins ``forgets.json`` once a forget has written the ledger.
_NOT_BUSY = orjson.dumps({"busy": False})[:-1] + b","


def busy_state(state: bytes | None) -> bool:
    """Whether `forget_state`'s bytes say a forget was under way (or was killed during one):
    any bytes but those `forgetting` writes after a forget (a half-written or hand-made file
    included) say it may be, and the worker reads the ledger again under its lock."""
    if state is None:
        return False
    return not state.startswith(_NOT_BUSY)


def forget_traces(ledger: Path, task_ids: list[str]) -> int:
    """Remove every file of ``<ledger>.work/`` that holds one of ``task_ids``, under the
    ledger's lock and before the ledger's records are removed: their records in every
    submission's fragments (each fragment rewritten atomically without them, or removed when
    nothing else is left in it), then ``latest/``, ``accepted/``, each submission's ``done/`` and
    ``lost/``, and their (expired) leases. Returns how many files were changed or removed.

    A crash part way leaves the ledger's records as they were (the forget did not happen; the
    fragments of the other tasks are whole), never a record that a merge could bring back
    after the ledger forgot it."""
    root = checked_root(ledger)
    if root is None or not task_ids:
        return 0
    ids = set(task_ids)
    changed = 0
    for path in fragment_files(ledger):  # first: a merge would bring their records back
        try:
            whole = _ownership.read_json(path, ledger)
        except (FileNotFoundError, orjson.JSONDecodeError):
            continue
        records = whole.get("records") if isinstance(whole, dict) else None
        if not isinstance(records, dict) or ids.isdisjoint(records):
            continue
        rest = {tid: rec for tid, rec in records.items() if tid not in ids}
        if rest:
            atomic_write(path, orjson.dumps(dict(whole, records=rest)))
        else:
            path.unlink(missing_ok=True)
        changed += 1
    submissions = [p for p in root.iterdir() if (p / "tasks.json").exists() or
                   (p / "done").is_dir()]
    for task_id in task_ids:
        key = task_key(task_id)
        files = [root / "latest" / f"{key}.json", root / "accepted" / key]
        files += [sub / folder / key for sub in submissions for folder in ("done", "lost")]
        files.append(root / "leases" / f"{key}.json")  # expired: a live one was refused
        for path in files:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            changed += 1
    return changed
