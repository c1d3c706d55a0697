"""The compiled record scanner reads bytes from any client: it is built again with AddressSanitizer
and UndefinedBehaviorSanitizer, and its tests run against that build, so that a read past a buffer
or an overflow in the C code fails CI even where the results happen to come out right."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import rill

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
SOURCES = {  # extension source -> where the build goes, inside the package
    ROOT / "src" / "rill" / "records" / "_scan.c": Path("records") / "_scan",
    ROOT / "src" / "rill" / "records" / "_key_scan.c": Path("records") / "_key_scan",
}
PROBE = "import rill.records._scan as s, rill.records._key_scan as k; print(s.__file__, k.__file__)"
TESTS = [
    "tests/unit/log/test_log.py",
    "tests/unit/records/test_scan.py",
    "tests/unit/log/test_scan_pieces.py",
    "tests/unit/log/test_record_validation.py",
    "tests/unit/log/test_timestamp_bounds.py",
    "tests/unit/records/test_key_scan.py",
    "tests/unit/log/test_cleaner_twins.py",
]


def _runtime(name: str) -> str:
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True)
    path = found.stdout.strip()
    assert os.path.isabs(path), f"gcc has no {name}: install the compiler's sanitizer runtimes"
    return path


def test_the_c_extensions_pass_their_tests_under_address_and_undefined_behaviour_sanitizers(tmp_path: Path) -> None:
    assert shutil.which("gcc"), "gcc is needed to build rill.records._scan"
    # A copy of the package whose _scan module is the sanitized build; put first on the path, it
    # shadows the installed package in the child process.
    package = tmp_path / "rill"
    shutil.copytree(Path(rill.__file__).parent, package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = []
    for source, target in SOURCES.items():
        built.append(package / f"{target}{suffix}")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
             "-fno-sanitize-recover=all", f"-I{sysconfig.get_paths()['include']}", str(source), "-o",
             str(built[-1])],
            check=True,
        )
    env = dict(
        os.environ,
        PYTHONPATH=str(tmp_path),
        PYTHONMALLOC="malloc",  # every object from malloc, with the sanitizer's guard zones around it
        LD_PRELOAD=f"{_runtime('libasan.so')} {_runtime('libubsan.so')}",
        # CPython keeps memory until exit, so no leak check; reports go to files, as the child pytest
        # captures its own stderr and an abort loses what it captured.
        ASAN_OPTIONS=f"detect_leaks=0:abort_on_error=1:log_path={tmp_path / 'asan'}",
        UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:log_path={tmp_path / 'ubsan'}",
    )
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert probe.stdout.split() == [str(b) for b in built]  # the children import the sanitized builds
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", *TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=840,
    )
    reports = "".join(p.read_text(errors="replace")[:3000] for p in tmp_path.glob("*san.*"))
    assert run.returncode == 0 and not reports, run.stdout[-3000:] + run.stderr[-2000:] + reports
