#!/usr/bin/env bash
# Build the Python package into a virtual environment (debug build, the workspace's target dir)
# and run its pytest suite. `.ci/run` calls this; it also works on a developer machine.
# Under CI=true a Redis or PostgreSQL that cannot be reached fails the Redis/Postgres tests;
# locally they are skipped with a loud reason.
set -euo pipefail
cd "$(dirname "$0")"
started=$SECONDS
venv="${PGW_PY_VENV:-$PWD/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.7,<2" "pytest>=8,<9" "pydantic>=2.7,<3" "aiohttp>=3.9,<4"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"
maturin develop
python -m pytest -q tests "$@"
echo "python/ci.sh: done in $((SECONDS - started)) s"
