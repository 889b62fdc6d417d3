"""This machine's name, looked up once."""

from __future__ import annotations

import socket

HOST = socket.gethostname()
