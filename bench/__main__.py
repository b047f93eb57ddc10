"""`python -m bench [--quick] [NAME ...]`: run the benchmarks (all, or those named) one by one."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", help="benchmarks to run (bench_<name>.py); default: all")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    found = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    chosen = [n for n in found if not args.names or n.removeprefix("bench_") in args.names or n in args.names]
    failed = []
    for name in chosen:
        print(f"=== {name} ===", flush=True)
        started = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        try:
            module.main(["--quick"] if args.quick else [])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            failed.append(name)
            print(f"{name} failed: {exc!r}", file=sys.stderr)
        print(f"=== {name}: {time.monotonic() - started:.0f} s ===", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
