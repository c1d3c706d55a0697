"""`--profile DIR`: sample the Rill broker with py-spy during each Rill run and say where its time goes.

py-spy writes collapsed stacks (`frame;frame;...;leaf count` per line, the "raw" format that flame graph
tools read); `summarize` turns one such file into the functions with the most samples on top of the stack
(self time) and the most samples anywhere on the stack (total time).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    samples: int
    self_top: list[tuple[str, int]]
    total_top: list[tuple[str, int]]


def _py_spy() -> str:
    candidate = Path(sys.executable).parent / "py-spy"
    return str(candidate) if candidate.exists() else "py-spy"


@contextlib.contextmanager
def maybe_profile(pid: int | None, out: Path | None) -> Iterator[None]:
    """Record `pid` with py-spy into `out` (collapsed stacks) while the body runs; no-op without both."""
    if pid is None or out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([_py_spy(), "record", "--pid", str(pid), "--rate", "250", "--nonblocking",
                            "--format", "raw", "--output", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)


def _frame_name(frame: str) -> str:
    """`func (path/to/module.py:123)` -> `func (module.py)`: lines differ per sample, functions do not."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})" if path else name


def summarize(path: Path, top: int = 12) -> ProfileSummary:
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        samples += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            total_counts[name] += count
    return ProfileSummary(samples, self_counts.most_common(top), total_counts.most_common(top))


def render(label: str, summary: ProfileSummary) -> str:
    if summary.samples == 0:
        return f"{label}: no samples"
    lines = [f"{label}: {summary.samples} samples", "  self time:"]
    lines += [f"    {n / summary.samples:6.1%}  {name}" for name, n in summary.self_top]
    lines.append("  on the stack:")
    lines += [f"    {n / summary.samples:6.1%}  {name}" for name, n in summary.total_top]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    for arg in argv:
        print(render(arg, summarize(Path(arg))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
