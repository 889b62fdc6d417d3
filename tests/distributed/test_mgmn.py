"""The seed's multi-node snippets across 2 launcher processes on emulated CPU devices."""

from __future__ import annotations

import pytest
from distkit import PYTHON, env, read, run
from testkit import ROOT

SCRIPT = ROOT / "tests" / "distributed" / "mgmn_script.py"


@pytest.mark.slow
def test_model_mesh_over_two_processes_places_arrays_and_solves(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    run([PYTHON, str(SCRIPT), str(one)], env=env())       # one process, 2 devices
    run([PYTHON, "-m", "solvers.distributed.launch", "-n", "2", str(SCRIPT), str(two)])
    alone = read(one / "mgmn.0.json")
    assert (alone["devices"], alone["processes"], alone["initialized"]) == (2, [0], False)
    for rank in (0, 1):
        got = read(two / f"mgmn.{rank}.json")
        assert got["initialized"] and got["devices"] == 4 and got["local"] == 2
        assert got["processes"] == [0, 1]
        assert got["sum"] == 0 + 1 + 2 + 3          # psum over both processes' devices
        assert got["uptake"] == pytest.approx(alone["uptake"], rel=1e-10)
