"""Blocks are checkpointed with their checksum: a damaged block is detected with the way out,
and forgetting its task recomputes that block only."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from lsq_rows import counted_rows, stacked
from testkit import PYTHON, child_env

from campaign import checkpointed_map
from solvers.lsq import BlockError, BlockStore, solve

N = 8


def assemble(tmp_path, **options):
    store = BlockStore(tmp_path / "fit.json.blocks", group_names=("energy", "force"))
    items = [{"task_id": f"s{i}", "i": i, "log": str(tmp_path / "calls.log")} for i in range(N)]
    camp = checkpointed_map(store.task(counted_rows), items, ledger_path=tmp_path / "fit.json",
                            **options)
    return store, camp


def calls(tmp_path):
    return [line.split()[0] for line in (tmp_path / "calls.log").read_text().splitlines()]


def test_damaged_block_is_detected_and_recomputed_alone(tmp_path):
    store, camp = assemble(tmp_path)
    result = camp.result("s5")
    assert set(result) == {"rows", "cols", "sha256", "file", "task_id"}
    assert (result["rows"], result["cols"]) == (20, 6) and len(result["sha256"]) == 64
    path = store.path / result["file"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # one bit of the last row
    path.write_bytes(bytes(data))

    system = store.system(camp)
    with pytest.raises(BlockError, match=r"of task 's5' changed since it was written") as err:
        solve(system, "normal")
    assert err.value.task_id == "s5"
    assert f"campaign forget {tmp_path / 'fit.json'} s5" in str(err.value)
    assert store.verify(camp) == ["s5"]

    forget = subprocess.run([PYTHON, "-m", "campaign._cli", "forget", str(tmp_path / "fit.json"),
                             "s5"], env=child_env(), capture_output=True, text=True)
    assert forget.returncode == 0, forget.stderr
    store, camp = assemble(tmp_path)
    assert calls(tmp_path) == [f"s{i}" for i in range(N)] + ["s5"]
    assert store.verify(camp) == []
    A, y, w, _ = stacked(N)
    s = np.sqrt(w)
    want = np.linalg.lstsq(A * s[:, None], y * s, rcond=None)[0]
    got = solve(store.system(camp), "normal").coefficients
    assert np.linalg.norm(got - want) < 1e-10 * np.linalg.norm(want)


def test_missing_block_and_incomplete_assembly_are_clear_errors(tmp_path):
    store, camp = assemble(tmp_path)
    (store.path / camp.result("s2")["file"]).unlink()
    with pytest.raises(BlockError, match="of task 's2' is missing; run `campaign forget"):
        solve(store.system(camp), "qr")

    def broken(item):
        if item["i"] == 3:
            raise RuntimeError("no DFT data for s3")
        return counted_rows(item)

    items = [{"task_id": f"s{i}", "i": i, "log": str(tmp_path / "c2.log")} for i in range(5)]
    camp = checkpointed_map(store.task(broken), items, ledger_path=tmp_path / "other.json")
    with pytest.raises(ValueError, match=r"incomplete \(4 of 5 blocks accepted; task 's3' "
                                         r"failed: RuntimeError: no DFT data for s3"):
        store.system(camp)
    assert len(store.system(camp.results)) == 4  # the accepted blocks, if that is what you want


def test_blocks_verify_once_per_process_unless_the_file_changes(tmp_path):
    store, camp = assemble(tmp_path)
    system = store.system(camp)
    solve(system, "lsqr")  # every pass after the first reads without hashing
    path = store.path / camp.result("s1")["file"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))  # a new mtime: checked again
    with pytest.raises(BlockError, match="'s1' changed"):
        solve(system, "lsqr")
    assert solve(store.system(camp, verify="never"), "qr").rank == 6


def test_rows_functions_that_return_bad_blocks_are_refused(tmp_path):
    task = BlockStore(tmp_path).task(lambda item: item["out"])
    with pytest.raises(TypeError, match="return a tuple"):
        task({"task_id": "a", "out": [1, 2]})
    with pytest.raises(ValueError, match=r"A of shape \(3,\) and y of shape \(3,\)"):
        task({"task_id": "a", "out": (np.ones(3), np.ones(3), 1.0)})
    with pytest.raises(ValueError, match="negative weights"):
        task({"task_id": "a", "out": (np.ones((2, 2)), np.ones(2), -1.0)})
    with pytest.raises(ValueError, match=r"non-finite values in y \(first at index \[1\]\)"):
        task({"task_id": "a", "out": (np.ones((2, 2)), np.array([0, np.nan]), 1.0)})
    with pytest.raises(ValueError, match="integer code from 0 to 255"):
        task({"task_id": "a", "out": (np.ones((2, 2)), np.ones(2), 1.0, np.array([0, 0.5]))})
    assert not list(tmp_path.iterdir())  # nothing written
