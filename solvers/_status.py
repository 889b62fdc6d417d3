"""`CodedStatus`: an enum of outcomes carried through compiled code as integer codes."""

from __future__ import annotations

import enum
from typing import Self

__all__ = ["CodedStatus"]


class CodedStatus(enum.Enum):
    """Members are ``(code, message)``; the code is what a compiled program returns."""

    def __init__(self, code: int, message: str):
        self.code, self.message = code, message

    @classmethod
    def of(cls, code: int) -> Self:
        """The member with this ``code``."""
        for s in cls:
            if s.code == code:
                return s
        raise ValueError(f"unknown {cls.__name__} code {code!r}")
