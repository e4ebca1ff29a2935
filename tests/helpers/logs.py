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
