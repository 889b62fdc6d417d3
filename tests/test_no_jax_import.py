"""`import campaign` and `import schedulers` never import JAX: a driver that touched the GPU
before it started its workers would leave them none (JAX preallocates most of each GPU)."""

from __future__ import annotations

import json
import subprocess

import pytest

from testkit import PYTHON, child_env

CHECK = """
import json, sys
import campaign, schedulers
{more}
print(json.dumps(sorted(m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib")))))
"""


@pytest.mark.parametrize("more", [
    "",
    # every public name of both packages, and the scheduler classes made by name
    "[getattr(campaign, n) for n in campaign.__all__]\n"
    "[getattr(schedulers, n) for n in dir(schedulers) if not n.startswith('_')]\n"
    "import campaign._cli, schedulers.slurm\n"
    "[schedulers.make_scheduler(n) for n in ('serial', 'processes', 'dask')]",
], ids=["import", "public-names"])
def test_campaign_and_schedulers_leave_jax_unimported(more):
    proc = subprocess.run([PYTHON, "-c", CHECK.format(more=more)], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
