"""A stand-in for ``context.log``: collects what the code under test logs."""

from __future__ import annotations


class Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    warning = info

    def text(self) -> str:
        return "\n".join(self.lines)


class Levels:
    """``context.log`` keeping info and warning lines apart, for tests that ask whether a warning was given."""

    def __init__(self):
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warning(self, message: str) -> None:
        self.warnings.append(message)
