#!/usr/bin/env bash
# Set up everything the test suite needs and run all of it: lint, types, and every test (slow ones too).
# Works on a fresh Debian 12 machine with Python 3.11 when run as root; apt is skipped when the system
# packages are already there. Exits non-zero on any failure (pytest's "no tests collected" included).
#
# The checks run in a copy of the repository (the files git tracks or would add: what a fresh clone has once
# they are committed) in a new temporary directory with nothing beside it, so no test can lean on a file
# outside the repository. The copy imports its own sources (PYTHONPATH) with the packages of ./.venv.
# Arguments, if any, go to pytest (e.g. a test path); without them every test runs.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\n\033[31mFAILED: %s\033[0m\n' "$*"; exit 1; }

PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
[ -n "$PY" ] || die "python3.11 not found"

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jdk-headless)
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# ip (iproute2): the network partition tests put brokers in network namespaces (as root).
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# The C extension (record scanner) and its sanitizer test need a compiler and the Python headers.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
# The web console's browser tests drive Debian's chromium (Playwright, pointed at the system browser).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
"$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
    step "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update"
    apt-get install -y -qq --no-install-recommends kcat zookeeper default-jdk-headless python3-venv gcc \
        python3-dev iproute2 chromium >/dev/null || die "apt-get install"
else
    step "system packages present (kcat, zookeeper, java, gcc, Python headers, ip, chromium)"
fi

if [ ! -x .venv/bin/python ]; then
    step "create .venv with $PY"
    "$PY" -m venv .venv || die "venv"
fi
step "pip install -e .[test,spark,bench]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark,bench]' || die "pip install"

WORK="$(mktemp -d)" || die "mktemp"
trap 'rm -rf "$WORK"' EXIT
COPY="$WORK/rill"
step "copy the repository to $COPY"
mkdir "$COPY" || die "mkdir $COPY"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked files and new ones git would add (not ignored ones: .venv, caches, rill-data, build output).
    git -C "$REPO" ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
        | tar --null -T - -cf - | tar -xf - -C "$COPY" || die "copy"
else
    tar --exclude=./.venv -cf - . | tar -xf - -C "$COPY" || die "copy"
fi
# The C extensions pip just built in place from these same sources.
find src -name '*.so' -exec cp --parents {} "$COPY" \; || die "copy the C extensions"
cd "$COPY" || die "cd $COPY"
export PYTHONPATH="$COPY/src${PYTHONPATH:+:$PYTHONPATH}"
where="$("$REPO/.venv/bin/python" -c 'import rill, pyspark_rill; print(rill.__file__); print(pyspark_rill.__file__)')"
case "$where" in
    "$COPY"/src/rill/__init__.py*"$COPY"/src/pyspark_rill.py) ;;
    *) die "the copy does not import its own sources: $where" ;;
esac

failed=()
step "ruff check"
"$REPO/.venv/bin/ruff" check . || failed+=(ruff)
step "mypy (src)"
"$REPO/.venv/bin/mypy" || failed+=(mypy)
# Most tests wait (for servers, elections, session timeouts, Spark) far more than they compute: a whole run
# keeps two cores about a third busy. Without arguments the tests run as two pytest processes side by side,
# each over half of the suite by duration (the second takes the cluster, chaos, ZooKeeper, mirror, quota, CLI
# and security tests, the first everything else, so a new test directory always runs), each with its own
# temporary directory; their reports follow each other. Then the tests that hold a measured time or rate to a
# bound (marked `timing`) run alone.
PYTEST=("$REPO/.venv/bin/pytest" -q -rfE --durations=15 -p no:cacheprovider)
LANE2=(tests/chaos tests/cluster tests/integration/zookeeper tests/integration/mirror tests/integration/quotas
       tests/integration/cli tests/integration/security)
pytest_failed() {  # $1: pytest's exit code, $2: what ran
    if [ "$1" -eq 5 ]; then
        failed+=("$2 (no tests collected)")
    elif [ "$1" -ne 0 ]; then
        failed+=("$2 (exit $1)")
    fi
}
if [ $# -gt 0 ]; then
    step "pytest $*"
    "${PYTEST[@]}" "$@"
    pytest_failed $? pytest
else
    step "pytest (all tests, slow ones included, in two processes side by side)"
    ignore=()
    for d in "${LANE2[@]}"; do ignore+=("--ignore=$d"); done
    started=$SECONDS
    "${PYTEST[@]}" --basetemp="$WORK/tmp-lane1" -m "not timing" tests "${ignore[@]}" >"$WORK/lane1.out" 2>&1 &
    lane1=$!
    "${PYTEST[@]}" --basetemp="$WORK/tmp-lane2" -m "not timing" "${LANE2[@]}" >"$WORK/lane2.out" 2>&1 &
    lane2=$!
    wait $lane1; rc1=$?
    wait $lane2; rc2=$?
    step "pytest, first half: tests less ${LANE2[*]}"
    cat "$WORK/lane1.out"
    step "pytest, second half: ${LANE2[*]}"
    cat "$WORK/lane2.out"
    printf '\nboth halves took %d s\n' $((SECONDS - started))
    pytest_failed $rc1 "pytest, first half"
    pytest_failed $rc2 "pytest, second half"
    step "pytest -m timing (alone)"
    "${PYTEST[@]}" --basetemp="$WORK/tmp-timing" -m timing tests
    pytest_failed $? "pytest -m timing"
fi

if [ ${#failed[@]} -gt 0 ]; then
    die "${failed[*]}"
fi
printf '\n\033[32mAll checks passed.\033[0m\n'
