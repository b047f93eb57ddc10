"""Writing a benchmark's section of bench/RESULTS.md, with the machine and the date.

Each benchmark owns one section between markers; running it again replaces that section, so the
file always shows the latest measurement of everything.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nWritten by `make bench` (each section by its own benchmark).\n"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(rows: list[dict]) -> str:
    """A Markdown table of dicts sharing keys."""
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def record(name: str, title: str, body: str) -> None:
    """Replace (or add) the section `name` of RESULTS.md with `body`, stamped with machine and date."""
    stamp = f"{datetime.date.today().isoformat()}, {machine()}"
    section = f"<!-- bench:{name} -->\n## {title}\n\n_{stamp}_\n\n{body.strip()}\n<!-- /bench:{name} -->\n"
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n", re.S)
    text = pattern.sub(lambda _m: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)
    print(f"\n{title}\n{body.strip()}\n")
