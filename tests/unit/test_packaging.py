"""The distribution is ``rill-broker`` (``rill`` on PyPI is an unrelated project); the import package and
the command stay ``rill``, and every install line in the docs installs this project."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_distribution_name_and_entry_points() -> None:
    assert PROJECT["name"] == "rill-broker"
    assert PROJECT["scripts"] == {"rill": "rill.cli.main:main"}
    dist = metadata.distribution("rill-broker")
    assert dist.version == PROJECT["version"]
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert scripts == {"rill": "rill.cli.main:main"}


def test_version_names_the_installed_distribution() -> None:
    out = subprocess.run([sys.executable, "-m", "rill", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"rill {PROJECT['version']}"


def test_every_install_line_installs_this_project() -> None:
    """``pip install`` lines in README.md, docs/*.md and the CLI's hints name ``rill-broker`` or a local path."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "src").rglob("*.py"))]
    lines = [
        (f.relative_to(ROOT), line)
        for f in files
        for line in f.read_text(encoding="utf-8").splitlines()
        if "pip install" in line
    ]
    assert lines
    for where, line in lines:
        for target in re.findall(r"pip install\s+((?:-\S+\s+)*)(\S+)", line):
            name = target[1].strip("`'\")")
            assert name.startswith((".", "rill-broker")), f"{where}: {line.strip()}"
