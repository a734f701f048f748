#!/usr/bin/env bash
# Set everything up on a fresh machine, then run the main job or the tests.
#
#   bash tools/run.sh main   # validate, generate and draw the specs, then run the agent demo
#   bash tools/run.sh test   # the lints, the type check, the freshness checks and the
#                            # whole test suite
#
# Setup is idempotent: a virtual environment in .venv with the package and its extras,
# the Graphviz `dot` binary (Debian package `graphviz`), the PostgreSQL server
# binaries (Debian package `postgresql`: initdb, pg_ctl; the tests start their own
# server from them, see docs/scale-out.md) and Chromium (Debian package `chromium`:
# the console's browser tests drive it with Playwright, which downloads no browser of
# its own; see docs/console.md) when they are missing. With PHRONOMY_TEST_POSTGRES_DSN
# set, the tests use that server instead; PHRONOMY_TEST_CHROMIUM names another browser.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

apt_install() {
  as_root apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 || {
    as_root apt-get update >/dev/null && as_root apt-get install -y --no-install-recommends "$@" >/dev/null
  }
}

have_postgres() {
  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

setup() {
  if ! command -v dot >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "installing Graphviz (dot)..." >&2
      apt_install graphviz
    else
      echo "Graphviz 'dot' is missing: install it (macOS: brew install graphviz; Fedora: dnf install graphviz)" >&2
      exit 1
    fi
  fi
  if [ -z "${PHRONOMY_TEST_POSTGRES_DSN:-}" ] && ! have_postgres; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "installing PostgreSQL (initdb, pg_ctl)..." >&2
      apt_install postgresql
    else
      echo "PostgreSQL server binaries are missing: install them (macOS: brew install postgresql; Fedora: dnf install postgresql-server) or set PHRONOMY_TEST_POSTGRES_DSN" >&2
      exit 1
    fi
  fi
  if [ -z "${PHRONOMY_TEST_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "installing Chromium (the console's browser tests)..." >&2
      apt_install chromium
    else
      echo "Chromium is missing: install it (macOS: brew install --cask chromium) or set PHRONOMY_TEST_CHROMIUM to a Chromium binary" >&2
      exit 1
    fi
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      command -v apt-get >/dev/null 2>&1 && apt_install python3-venv
      "$PYTHON" -m venv "$VENV"
    fi
  fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,bench,postgres,console,otel,otlp]"
}

checks() {
  "$VENV/bin/phronomy-fsm" validate fsm_specs/*.yaml
  "$VENV/bin/phronomy-fsm" generate --check
  "$VENV/bin/phronomy-fsm" diagram --all --check
}

# The layering contracts (import-linter, [tool.importlinter] in pyproject.toml), the
# type check and the stated ruff rule set; run from the repository root (lint-imports
# finds the top-level codegen/ package there).
lints() {
  echo "== lint-imports" >&2
  "$VENV/bin/lint-imports"
  echo "== mypy src codegen" >&2
  "$VENV/bin/mypy" src codegen
  echo "== ruff" >&2
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check .
}

main_job() {
  checks
  echo "== specs valid, generated code and diagrams fresh"
  local db=.phronomy/demo.db out
  rm -f "$db" "$db-wal" "$db-shm" "$db-mark" .phronomy/demo-refunds.jsonl
  echo "== demo: the agent runs until it needs an approval"
  out=$("$VENV/bin/phronomy-fsm" demo --db "$db")
  echo "$out"
  local execution request
  execution=$(echo "$out" | sed -n 's/^execution_id: //p')
  request=$(echo "$out" | sed -n 's/^approval_request_id: //p')
  echo "== approve (a separate process records the decision durably)"
  "$VENV/bin/phronomy-fsm" approve "$execution" --request "$request" --db "$db"
  echo "== demo --resume (a new process recovers the execution and finishes it)"
  "$VENV/bin/phronomy-fsm" demo --resume --db "$db"
  echo "== the execution as stored"
  "$VENV/bin/phronomy-fsm" executions show "$execution" --db "$db"
}

# The suite in three processes (pytest-xdist; the machine this project targets has two
# cores, and many tests wait on subprocesses, fsyncs and servers rather than compute),
# sharing one PostgreSQL server (tests/conftest.py). Waits on conditions get more time on
# a busy machine (PHRONOMY_TEST_TIME_SCALE, phronomy_fsm/testing/deadlines.py); they end
# as soon as their condition holds, so a generous limit costs nothing when all is well.
run_tests() {
  PHRONOMY_TEST_TIME_SCALE=${PHRONOMY_TEST_TIME_SCALE:-2} \
    "$VENV/bin/python" -m pytest -q -n "${PHRONOMY_TEST_PROCESSES:-3}" --durations=15
}

case "${1:-}" in
  main) setup; main_job ;;
  test) setup; checks; lints; run_tests ;;
  *) echo "usage: bash tools/run.sh main|test" >&2; exit 2 ;;
esac
