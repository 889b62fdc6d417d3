"""The lsq tests import their rows functions (lsq_rows.py) by name, as worker processes do."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
