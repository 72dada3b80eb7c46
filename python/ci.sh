#!/usr/bin/env bash
# Build the Python package into a virtual environment (debug build, the workspace's target dir)
# and run its pytest suite. `.ci/run` calls this; it also works on a developer machine.
# Under CI=true a Redis or PostgreSQL that cannot be reached fails the Redis/Postgres tests;
# locally they are skipped with a loud reason.
set -euo pipefail
cd "$(dirname "$0")"
started=$SECONDS
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"
# Inside the target dir: ignored by git and by the repository-text checks (tests/docs_drift.rs).
venv="${PGW_PY_VENV:-$CARGO_TARGET_DIR/py-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.7,<2" "pytest>=8,<9" "pydantic>=2.7,<3" "aiohttp>=3.9,<4"
export PYTHONDONTWRITEBYTECODE=1
# The Rust process of the cross-process tests (test_redis_shared.py, test_telemetry.py): the
# operator CLI. `.ci/run` passes the one its nextest run just built; otherwise build it here.
if [ -z "${PGW_TEST_CLI:-}" ]; then
  cargo build --quiet -p polygateway --features full,testkit --bin polygateway
  export PGW_TEST_CLI="$CARGO_TARGET_DIR/debug/polygateway"
fi
if [ -n "${PGW_PY_NATIVE:-}" ]; then
  # An extension module cargo already built (`.ci/run`: the workspace build, with
  # PYO3_BUILD_EXTENSION_MODULE=1), installed the way `maturin develop` installs this layout: the
  # module beside the Python sources, found through a .pth. `maturin sdist` still checks the
  # packaging metadata (pyproject.toml, Cargo.toml) without compiling again.
  cp "$PGW_PY_NATIVE" polygateway/_native.abi3.so
  site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$PWD" >"$site/polygateway_dev.pth"
  maturin sdist --out "$CARGO_TARGET_DIR/wheels"
else
  maturin develop
fi
python -m pytest -q -rs -p no:cacheprovider tests "$@"
echo "python/ci.sh: done in $((SECONDS - started)) s"
