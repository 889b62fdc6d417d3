"""A mesh whose model groups mix one-process and several-process devices is refused."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pytest

from solvers import Layout
from solvers._mesh import check_model_groups, global_mesh


@dataclass(frozen=True)
class Device:
    """A device as the check sees it: an id and the process that owns it."""

    id: int
    process_index: int


def grid(processes: list[list[int]]) -> np.ndarray:
    out = np.empty((len(processes), len(processes[0])), dtype=object)
    for i, row in enumerate(processes):
        for j, p in enumerate(row):
            out[i, j] = Device(i * len(row) + j, p)
    return out


@pytest.mark.parametrize("processes", [[[0, 0], [1, 1]], [[0, 1], [0, 1]], [[0, 0], [0, 0]]])
def test_uniform_groups_pass(processes):
    check_model_groups(grid(processes), ("data", "model"))


def test_mixed_groups_are_refused_with_the_reason():
    with pytest.raises(ValueError) as info:
        check_model_groups(grid([[0, 0], [0, 1]]), ("data", "model"))
    message = str(info.value)
    assert "group 0 lies in process 0" in message and "group 1 spans processes [0, 1]" in message
    assert "DIFFSOUP_MGMN=1" in message


def test_model_axis_first_and_no_model_axis():
    # Model groups are the columns here: (0,0) one process, (0,1) two.
    with pytest.raises(ValueError, match="mix one-process and several-process"):
        check_model_groups(grid([[0, 0], [0, 1]]), ("model", "data"))
    check_model_groups(grid([[0, 0], [0, 1]]), ("data", "replica"))


def test_layout_on_a_one_process_mesh_is_accepted():
    n = len(jax.devices())
    layout = Layout(mesh=global_mesh(("data", "model"), shape=(-1, 2 if n % 2 == 0 else 1)))
    assert layout.mesh is not None
