#!/usr/bin/env bash
# Build the Python package as a wheel (debug profile, the workspace's target dir), install it into
# a fresh virtual environment as a user would (`pip install <wheel>[structured]`), and run the
# pytest suite against that install from a copy of the tests outside the checkout, so nothing can
# import `python/polygateway` from the source tree. `.ci/run` calls this; it also works on a
# developer machine. Under CI=true a Redis or PostgreSQL that cannot be reached fails the
# Redis/Postgres tests; locally they are skipped with a loud reason.
set -euo pipefail
cd "$(dirname "$0")"
started=$SECONDS
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"

# The build tools live in a virtual environment of their own (kept between runs), not in the one
# the tests use: that one holds only the wheel and what the tests import. Its pip installs into
# the test environment (`--python`, pip ≥ 22.3), which so needs no pip of its own: creating a
# venv without pip takes a second instead of ~15 on a loaded CI machine.
tools="$CARGO_TARGET_DIR/py-build-venv"
tools_pip() { "$tools/bin/python" -m pip --disable-pip-version-check "$@"; }
if [ ! -x "$tools/bin/maturin" ]; then
  python3 -m venv "$tools"
  tools_pip install --quiet "pip>=22.3" "maturin>=1.7,<2"
fi

# The Rust process of the cross-process tests (test_redis_shared.py, test_telemetry.py): the
# operator CLI. `.ci/run` passes the one its nextest run just built; otherwise build it here.
if [ -z "${PGW_TEST_CLI:-}" ]; then
  cargo build --quiet -p polygateway --features full --bin polygateway
  export PGW_TEST_CLI="$CARGO_TARGET_DIR/debug/polygateway"
fi

# The wheel, with the caller's cargo environment (`.ci/run`: flags, target dir), so the
# dependencies compiled for it are reused from run to run; cargo resolves features for the Python
# crate alone here, so the workspace's crates compile once more (about a minute). Without the
# clippy wrapper: `.ci/run`'s workspace build linted this code already. Debug profile: a release
# build is ten minutes on CI's two cores. pyproject.toml strips it and tags it `linux`.
wheels="$CARGO_TARGET_DIR/wheels/ci"
rm -rf "$wheels"
env -u RUSTC_WORKSPACE_WRAPPER "$tools/bin/maturin" build --out "$wheels"
wheel=("$wheels"/polygateway-*.whl)
if [ "${#wheel[@]}" != 1 ] || [ ! -f "${wheel[0]}" ]; then
  echo "python/ci.sh: expected one wheel in $wheels, found: ${wheel[*]}" >&2
  exit 1
fi
echo "python/ci.sh: built $(basename "${wheel[0]}") ($(du -h "${wheel[0]}" | cut -f1))"

# A fresh virtual environment each run: the wheel with its `structured` extra (pydantic), plus
# the test tools. No .pth, no editable install: the package exists only in its site-packages.
venv="$CARGO_TARGET_DIR/py-venv"
install_started=$SECONDS
rm -rf "$venv"
python3 -m venv --without-pip "$venv"
tools_pip --python "$venv/bin/python" install --quiet --no-compile \
  "${wheel[0]}[structured]" "pytest>=8,<9" "aiohttp>=3.9,<4"
echo "python/ci.sh: fresh venv and pip install took $((SECONDS - install_started)) s"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r tests "$work/tests"
cd "$work"
# test_install.py checks the import came from this wheel's install.
export PGW_PY_WHEEL="${wheel[0]}" PYTHONDONTWRITEBYTECODE=1
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests "$@"
echo "python/ci.sh: done in $((SECONDS - started)) s"
