"""A linear pair-potential fit at cluster scale, small enough for a laptop: docs/lsq.md.

Each training structure gives one block of rows (its energy, and 3 force components per atom);
`checkpointed_map` computes the blocks (on any scheduler) and checkpoints them as files with
their checksums; the solvers read them back block by block.

    python examples/lsq_fit.py [LEDGER] [EXECUTION]     # default: lsq_fit.json serial

Run it, kill it, run it again: finished blocks are kept and not computed again.
"""

from __future__ import annotations

import sys

import numpy as np

from campaign import checkpointed_map
from solvers.lsq import BlockStore, solve

BASIS = 4                                # exp(-a_k r) pair functions, a_k = 0.5 ... 4
TRUTH = np.linspace(1.0, -0.5, BASIS)    # the coefficients the data were made with
DECAY = np.linspace(0.5, 4.0, BASIS)


def rows(config: dict) -> tuple:
    """The rows of one structure: (A, y, weights, groups); group 0 energy, 1 forces."""
    rng = np.random.default_rng(config["seed"])
    atoms = config["atoms"]
    pos = rng.uniform(0.0, 2.5, (atoms, 3))
    diff = pos[:, None, :] - pos[None, :, :]                      # (atoms, atoms, 3)
    dist = np.sqrt((diff ** 2).sum(-1)) + np.eye(atoms)           # no self pairs below
    phi = np.exp(-DECAY * dist[..., None]) * (1 - np.eye(atoms))[..., None]
    energy = phi.sum((0, 1)) / 2 / atoms                          # per-atom energy row
    forces = (DECAY * phi)[:, :, None, :] * diff[..., None] / dist[..., None, None]
    forces = forces.sum(1).reshape(3 * atoms, BASIS)              # -dE/dx, one row each
    A = np.vstack([energy, forces])
    y = A @ TRUTH + rng.normal(0.0, 1e-4, A.shape[0])             # "DFT" data with noise
    groups = np.r_[0, np.ones(3 * atoms, dtype=int)]
    weights = np.where(groups == 0, 100.0, 1.0)                   # energy rows weigh more
    return A, y, weights, groups


def main(ledger: str = "lsq_fit.json", execution: str = "serial") -> None:
    store = BlockStore(f"{ledger}.blocks", group_names=("energy", "force"))
    configs = [{"task_id": f"s{i:03d}", "seed": i, "atoms": 4 + i % 5} for i in range(60)]
    campaign = checkpointed_map(store.task(rows), configs, ledger_path=ledger,
                                execution=execution)
    system = store.system(campaign)                  # lazy: no block is read yet
    train, test = system.split(["s000", "s001", "s002", "s003", "s004"])
    print(f"{system}: {len(train)} blocks fitted, {len(test)} held out")
    for method in ("qr", "normal", "lsqr"):
        fit = solve(train, method, ridge=1e-8, validation=test)
        error = np.abs(fit.coefficients - TRUTH).max()
        print(f"{method:>6}: max |x - truth| = {error:.1e}, "
              f"RMSE energy {fit.residuals.rmse['energy']:.1e} force "
              f"{fit.residuals.rmse['force']:.1e}, held-out RMSE energy "
              f"{fit.validation.rmse['energy']:.1e} force {fit.validation.rmse['force']:.1e}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
