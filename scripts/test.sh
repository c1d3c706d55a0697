#!/usr/bin/env bash
# Set up everything the test suite needs and run all of it: lint, types, and every test (slow ones too).
# Works on a fresh Debian 12 machine with Python 3.11 when run as root; apt is skipped when the system
# packages are already there. Exits non-zero on any failure (pytest's "no tests collected" included).
set -uo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\n\033[31mFAILED: %s\033[0m\n' "$*"; exit 1; }

PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
[ -n "$PY" ] || die "python3.11 not found"

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jdk-headless)
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# The C extension (record scanner) and its sanitizer test need a compiler and the Python headers.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
"$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
    step "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update"
    apt-get install -y -qq --no-install-recommends kcat zookeeper default-jdk-headless python3-venv gcc \
        python3-dev >/dev/null || die "apt-get install"
else
    step "system packages present (kcat, zookeeper, java, gcc, Python headers)"
fi

if [ ! -x .venv/bin/python ]; then
    step "create .venv with $PY"
    "$PY" -m venv .venv || die "venv"
fi
step "pip install -e .[test,spark,bench]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark,bench]' || die "pip install"

failed=()
step "ruff check"
.venv/bin/ruff check . || failed+=(ruff)
step "mypy (src)"
.venv/bin/mypy || failed+=(mypy)
step "pytest (all tests, slow ones included)"
.venv/bin/pytest -q -rfE --durations=15 -p no:cacheprovider
rc=$?
if [ $rc -eq 5 ]; then
    failed+=("pytest (no tests collected)")
elif [ $rc -ne 0 ]; then
    failed+=("pytest (exit $rc)")
fi

if [ ${#failed[@]} -gt 0 ]; then
    die "${failed[*]}"
fi
printf '\n\033[32mAll checks passed.\033[0m\n'
