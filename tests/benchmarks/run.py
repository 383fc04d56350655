"""``make bench``: run every ``tests/benchmarks/bench_*.py`` module's ``run()`` and print one table.

Targets are reported next to the measurements, never asserted.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(names: list[str]) -> int:
    modules = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    selected = [m for m in modules if not names or any(n in m for n in names)]
    rows: list[tuple[str, str, str]] = []
    for module in selected:
        print(f"running {module} ...", file=sys.stderr, flush=True)
        rows.extend(importlib.import_module(f"tests.benchmarks.{module}").run())
    widths = [max(len(r[i]) for r in [("measure", "value", "target"), *rows]) for i in range(3)]
    line = "+".join("-" * (w + 2) for w in widths)
    print(f"+{line}+")
    for i, row in enumerate([("measure", "value", "target"), *rows]):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            print(f"+{line}+")
    print(f"+{line}+")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
