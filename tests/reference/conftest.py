"""The reference tests import their data helpers (e.g. nist_linear.py) from this folder by name."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
