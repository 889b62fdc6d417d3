"""One version, from the package metadata: the packages' ``__version__`` and `campaign --version`."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

import campaign
import schedulers
from testkit import PYTHON, child_env


def test_the_packages_carry_the_installed_version():
    installed = version("diffsoup-campaign")
    assert campaign.__version__ == schedulers.__version__ == installed


def test_the_command_prints_it():
    out = subprocess.run([PYTHON, "-m", "campaign._cli", "--version"], capture_output=True,
                         text=True, env=child_env(), check=True).stdout
    assert out.strip() == f"campaign, version {version('diffsoup-campaign')}"


def test_solvers_carries_it_too():
    out = subprocess.run([PYTHON, "-c", "import solvers; print(solvers.__version__)"],
                         capture_output=True, text=True, env=child_env(), check=True).stdout
    assert out.strip() == version("diffsoup-campaign")
