"""global_mesh, mesh_groups and Layout on 8 emulated CPU devices."""

from __future__ import annotations

import jax
import pytest

import solvers as ds


def test_global_mesh_spans_every_device():
    mesh = ds.global_mesh(("data",))
    assert mesh.axis_names == ("data",)
    assert mesh.shape["data"] == jax.device_count() == 8
    assert [d.id for d in mesh.devices.reshape(-1)] == [d.id for d in jax.devices()]
    assert ds.global_mesh("data").shape == mesh.shape


@pytest.mark.parametrize("shape, expected", [((4, 2), (4, 2)), ((-1, 2), (4, 2)),
                                             ((2, -1), (2, 4)), ((8, 1), (8, 1))])
def test_global_mesh_two_axes(shape, expected):
    mesh = ds.global_mesh(("data", "model"), shape=shape)
    assert (mesh.shape["data"], mesh.shape["model"]) == expected


@pytest.mark.parametrize("axes, shape, match", [
    (("data", "model"), None, r"needs shape=.*8 devices"),
    (("data", "model"), (3, -1), r"size 3 does not divide the 8 devices.*1, 2, 4, 8"),
    (("data", "model"), (2, 2), r"covers 4 devices but JAX sees 8"),
    (("data",), (16,), r"size 16 does not divide the 8 devices"),
    (("data", "model"), (4,), r"has 1 entries but the mesh has 2 axes"),
    (("data", "model"), (-1, -1), r"more than one -1"),
    (("data", "data"), (4, 2), r"distinct"),
    ((), None, r"non-empty"),
])
def test_global_mesh_errors(axes, shape, match):
    with pytest.raises(ValueError, match=match):
        ds.global_mesh(axes, shape=shape)


def test_mesh_groups_one_device_each():
    assert ds.mesh_groups(ds.global_mesh(("data",)), (1,)) == [(i,) for i in range(8)]


def test_mesh_groups_blocks_of_a_two_axis_mesh():
    mesh = ds.global_mesh(("data", "model"), shape=(4, 2))
    assert ds.mesh_groups(mesh, (1, 2)) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert ds.mesh_groups(mesh, (2, 1)) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert ds.mesh_groups(mesh, (1, 1)) == [(i,) for i in range(8)]
    groups = ds.mesh_groups(mesh, (4, 2))
    assert groups == [tuple(range(8))]
    assert all(isinstance(i, int) for g in groups for i in g)


@pytest.mark.parametrize("group_shape, match", [((3,), r"divisor of the axis size 8"),
                                                ((1, 1), r"one block size per axis"),
                                                ((0,), r"positive divisor")])
def test_mesh_groups_errors(group_shape, match):
    with pytest.raises(ValueError, match=match):
        ds.mesh_groups(ds.global_mesh(("data",)), group_shape)


def test_layout_checks_its_arguments():
    assert ds.Layout().mesh is None and ds.Layout().balance_steps is None
    with pytest.raises(TypeError, match=r"jax.sharding.Mesh"):
        ds.Layout(mesh=("data",))  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(TypeError, match="None, True or False"):
        ds.Layout(balance_steps="yes")  # type: ignore[arg-type]  # the wrong type under test
