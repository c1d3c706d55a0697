"""How fast the page cache fills, step by step, after a pause in which nothing was freed.

    python bench/page_fill.py [--dir DIR] [--pause S] [--total-mib N] [--step-mib N] [--tries N]

Writes ``--total-mib`` (2048) in 1 MiB ``os.write`` calls into a new file, timing every ``--step-mib``
(256) step, after ``--pause`` (8) seconds of sleep; the file is deleted after each try. On a VM whose
balloon driver hands free memory back to the host, the first steps reuse memory the host still maps and
the later ones fault new memory in: the rate of those later steps is what a growing log meets.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20


def one_try(path: Path, total_mib: int, step_mib: int, pause: float) -> list[float]:
    """MiB/s of each step of one try."""
    block = os.urandom(MIB)
    time.sleep(pause)
    rates = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(total_mib // step_mib):
            start = time.perf_counter()
            for _ in range(step_mib):
                os.write(fd, block)
            rates.append(step_mib / (time.perf_counter() - start))
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return rates


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, help="directory to write in (default: a temp dir)")
    ap.add_argument("--pause", type=float, default=8.0)
    ap.add_argument("--total-mib", type=int, default=2048)
    ap.add_argument("--step-mib", type=int, default=256)
    ap.add_argument("--tries", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="page-fill-", dir=args.dir) as tmp:
        for n in range(args.tries):
            rates = one_try(Path(tmp) / "fill.bin", args.total_mib, args.step_mib, args.pause)
            print(f"try {n + 1}, {args.pause:g} s pause, MiB/s per {args.step_mib} MiB step: "
                  + ", ".join(f"{r:,.0f}" for r in rates), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
