"""A built particle problem carries its parameters: the multi-GPU page's
``pdesolve(problem, JIDA(linear=...), (0.0, 2.0), y0, saveat=SaveAt(ts=ts))`` runs without
``args=``; ``args=`` replaces them; a problem with none says where to give them."""

from __future__ import annotations

import numpy as np
import pytest

import solvers as ds
from solvers.dae import JIDA, PARTICLES, SOLUTIONS, DAEProblem, ParticleSpec, SaveAt, pdesolve

SPEC = ParticleSpec(cells=6)
TS = np.linspace(0.0, 2.0, 5)
SOLVER = JIDA(linear="dense")


def _solve(problem, **kw):
    return pdesolve(problem, SOLVER, (0.0, 2.0), SPEC.initial_state(), saveat=SaveAt(ts=TS),
                    **kw)


def test_without_args_a_built_problem_solves_particle_a_in_the_first_solution():
    D, k = PARTICLES["A"]
    alone = _solve(SPEC.build())
    given = _solve(SPEC.build(), args={"D": D, "k": k, "c_b": SOLUTIONS[0]})
    assert alone.success and alone.ys.shape == (TS.size, SPEC.n)
    np.testing.assert_array_equal(alone.ys, given.ys)
    assert float(alone.ys[-1, -1]) > 0.5  # the surface took up the species


def test_args_replace_the_problem_s_own():
    D, k = PARTICLES["C"]
    other = {"D": D, "k": k, "c_b": SOLUTIONS[1]}
    alone = _solve(SPEC.build())
    given = _solve(SPEC.build(), args=other)
    assert given.success
    assert not np.allclose(given.ys[1:], alone.ys[1:], rtol=1e-3)
    assert SPEC.build().args == SPEC.default_args()  # the call changed nothing on the problem


def test_the_page_s_model_parallel_lines_run_as_written():
    """`global_mesh(("model",))` over every device here (8 emulated CPU devices in the test
    run); on CPUs each process factors the whole matrix, so the solve equals the one-device
    solve."""
    mesh = ds.global_mesh(("model",))
    problem = SPEC.build(layout=ds.Layout(mesh=mesh))
    y0, ts = SPEC.initial_state(), TS
    sol = ds.pdesolve(problem, ds.JIDA(linear="dense"), (0.0, 2.0), y0, saveat=ds.SaveAt(ts=ts))
    assert sol.success
    np.testing.assert_allclose(sol.ys, _solve(SPEC.build()).ys, rtol=1e-12, atol=1e-14)


def test_a_problem_without_parameters_says_where_to_give_them():
    bare = DAEProblem(SPEC.residual, SPEC.pattern(), algebraic=[SPEC.cells])
    with pytest.raises(TypeError, match=r"args=None .*pass pdesolve\(\.\.\., args=\{\.\.\.\}\)"):
        _solve(bare)
