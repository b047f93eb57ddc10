"""Metric names as small integer codes, so that a batch of rows carries one int a row instead of a
string, and the names become a categorical column once."""

from __future__ import annotations

import numpy as np


class NameCodes:
    """Each distinct name gets the next code, in the order names are first seen."""

    def __init__(self) -> None:
        self.all: list[str] = []
        self._code: dict[str, int] = {}

    def code(self, name: str) -> int:
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = len(self.all)
            self.all.append(name)
        return code

    def codes(self, names) -> np.ndarray:
        return np.fromiter(map(self.code, names), dtype=np.int64, count=len(names))
