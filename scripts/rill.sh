#!/usr/bin/env bash
# Run a `rill` command from this checkout (`bash scripts/rill.sh broker`), setting it up the first time:
# a virtual environment (./.venv, or $RILL_VENV) with Rill installed in it (`pip install -e .`), so
# nothing is installed into the system Python (Debian refuses that: PEP 668, "externally managed").
# Where Python cannot make a virtual environment (Debian without python3-venv), it installs python3-venv
# with apt-get when run as root, and says what to install otherwise. Later runs start at once; the
# install is repeated only when pyproject.toml or a C source changed since. Any arguments go to `rill`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RILL_VENV:-$ROOT/.venv}"
STAMP="$VENV/.rill-installed"

say() { printf 'rill.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.11 python3.12 python3.13 python3.14 python3; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

make_venv() {  # make_venv PYTHON: true when $VENV has a working pip afterwards
    "$1" -m venv "$VENV" >/dev/null 2>&1 && "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

if [ ! -x "$VENV/bin/python" ]; then
    PY="$(find_python)" || die "Python 3.11 or newer not found (Debian 12: apt-get install python3)"
    say "creating a virtual environment in $VENV with $PY"
    if ! make_venv "$PY"; then
        rm -rf "$VENV"  # what the failed attempt left (a venv without pip)
        venv_pkg="python3-venv"
        # Debian packages the venv module per Python version; python3-venv is the one of the default python3.
        version='import sys; print(sys.version_info[:2])'
        [ "$("$PY" -c "$version")" = "$(python3 -c "$version" 2>/dev/null)" ] || venv_pkg="$(basename "$PY")-venv"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            say "Python cannot make a virtual environment: apt-get install $venv_pkg"
            export DEBIAN_FRONTEND=noninteractive
            { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$venv_pkg" >/dev/null; } \
                || die "apt-get install $venv_pkg failed"
            make_venv "$PY" || { rm -rf "$VENV"; die "cannot create a virtual environment in $VENV"; }
        else
            die "Python cannot make a virtual environment: install $venv_pkg (as root: apt-get install $venv_pkg)"
        fi
    fi
fi

# Installed by this script before: again when the project's build inputs changed since. Installed some other
# way (scripts/test.sh installs more): as it is.
changed_since_install() {
    [ -e "$STAMP" ] && [ -n "$(find "$ROOT/pyproject.toml" "$ROOT/src" \( -name pyproject.toml -o -name '*.c' \) \
        -newer "$STAMP" -print -quit 2>/dev/null)" ]
}
if [ ! -x "$VENV/bin/rill" ] || changed_since_install; then
    say "installing Rill into $VENV (pip install -e .)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT" || die "pip install -e $ROOT failed"
    touch "$STAMP"
fi

exec "$VENV/bin/rill" "$@"
