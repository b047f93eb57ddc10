"""Where the real training logs and benchmark data live, for the tests and the benchmarks:
$GAPWATCH_TEST_DATA, else the data folder the project's machines keep beside the repository
(runs/, evals/, text/; its README describes each file). This is the one place that names it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL_DATA = Path(os.environ.get("GAPWATCH_TEST_DATA", REPO.parent / "shared" / "data"))
