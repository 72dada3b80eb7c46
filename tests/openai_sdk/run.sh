#!/usr/bin/env bash
# End-to-end check of `polygateway serve` with real clients:
#   1. the unchanged OpenAI Python SDK (pip, in a venv under the cargo target dir) runs
#      tests/openai_sdk/test_sdk.py: chat, streaming, embeddings, models, errors, virtual keys;
#      tests/openai_sdk/test_anthropic.py: the official `anthropic` SDK against the Anthropic
#      mock (the mock speaks the published API), the OpenAI SDK through `serve` onto it;
#      and the unchanged `anthropic` SDK with the OpenAI SDK's Responses client run
#      tests/openai_sdk/test_ingress.py: /v1/messages and /v1/responses on the OpenAI-compatible
#      source (translated); tests/openai_sdk/test_ingress_native.py: both on the Anthropic source
#      (Messages passed through, compared with the SDK talking to the mock directly);
#   2. headless Chromium (Debian's `chromium`) renders the status page: the DOM must show every
#      source of every scope, and a screenshot must be produced;
#   3. SIGTERM shuts the server down gracefully (exit code 0).
# The server and the mock upstreams are the debug `polygateway` binary (features full,testkit).
# Usage: tests/openai_sdk/run.sh   (CI=true: a missing Chromium that cannot be installed fails)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=$TARGET/openai-sdk-venv
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "openai_sdk: $*"; }

# --- tools -------------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    step "creating $VENV"
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import openai, anthropic, pytest' 2>/dev/null; then
    step "pip install openai anthropic pytest"
    "$VENV/bin/pip" install --quiet openai "anthropic>=0.40,<3" pytest
fi
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    step "installing chromium (apt-get)"
    if apt-get install -y chromium >"$WORK/apt.log" 2>&1 \
        || (apt-get update >/dev/null 2>&1 && apt-get install -y chromium >"$WORK/apt.log" 2>&1); then
        CHROMIUM=$(command -v chromium)
    elif [ "${CI:-}" = "true" ]; then
        echo "openai_sdk: FAIL: chromium is not installed and apt-get could not install it" >&2
        tail -5 "$WORK/apt.log" >&2
        exit 1
    else
        step "chromium unavailable: the status-page browser check is SKIPPED (it fails under CI=true)"
    fi
fi
# `.ci/run` passes the binary its nextest run built (PGW_TEST_CLI); otherwise build it here.
if [ -n "${PGW_TEST_CLI:-}" ]; then
    BIN=$PGW_TEST_CLI
else
    (cd "$ROOT" && cargo build --quiet --features full,testkit --bin polygateway)
    BIN=$TARGET/debug/polygateway
fi

# The server reads PGW_* from its environment and refuses keys it does not know: the test
# harness's own PGW_TEST_* variables (set by .ci/run) stay out of its environment.
for var in $(compgen -e); do
    case $var in PGW_TEST_*) unset "$var" ;; esac
done

# --- mock upstreams and server -----------------------------------------------------------------
# The output files exist before the background processes open them: the polling below reads
# them at once (a missing file would end this script under `set -e`).
: >"$WORK/mock.out"
: >"$WORK/serve.out"
"$BIN" mock --chunks 6 >"$WORK/mock.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q OCR_BASE_URL "$WORK/mock.out" && break; sleep 0.1; done
LLM_URL=$(sed -n 's/^LLM_BASE_URL=//p' "$WORK/mock.out")
ANTHROPIC_URL=$(sed -n 's/^ANTHROPIC_BASE_URL=//p' "$WORK/mock.out")
OCR_URL=$(sed -n 's/^OCR_BASE_URL=//p' "$WORK/mock.out")
[ -n "$LLM_URL" ] && [ -n "$ANTHROPIC_URL" ] && [ -n "$OCR_URL" ] || { cat "$WORK/mock.out"; exit 1; }

KEY=$("$BIN" key new | sed -n 's/^key: *//p')
LLM_ONLY_KEY=$("$BIN" key new | sed -n 's/^key: *//p')
LIMITED_KEY=$("$BIN" key new | sed -n 's/^key: *//p')
cat >"$WORK/keys.json" <<JSON
{"keys": [
  {"name": "sdk", "hash": "$("$BIN" key hash "$KEY")", "tenant": "sdk-tests", "scopes": ["*"]},
  {"name": "llm-only", "hash": "$(echo "$LLM_ONLY_KEY" | "$BIN" key hash)", "scopes": ["LLM"]},
  {"name": "limited", "hash": "$("$BIN" key hash "$LIMITED_KEY")", "scopes": ["LLM"], "rpm": 1}
]}
JSON
cat >"$WORK/.env" <<ENV
PGW_LIMITER_BACKEND=memory
PGW_BREAKER_BACKEND=memory
PGW_TELEMETRY_BACKEND=none
PGW_SERVER_BIND=127.0.0.1:0
PGW_SERVER_KEYS_FILE=$WORK/keys.json
PGW_SERVER_MODEL_ALIASES=gpt-4o-mini=LLM,text-embedding-3-small=EMBED
LLM__OPENAI__1__BASE_URL=$LLM_URL
LLM__OPENAI__1__API_KEY=sk-mock-upstream
LLM__OPENAI__1__MODEL=mock-model
LLM__BACKUP__1__BASE_URL=$LLM_URL
LLM__BACKUP__1__API_KEY=sk-mock-upstream
LLM__BACKUP__1__MODEL=mock-model
EMBED__OPENAI__1__BASE_URL=$LLM_URL
EMBED__OPENAI__1__API_KEY=sk-mock-upstream
EMBED__OPENAI__1__MODEL=mock-embed
EMBED__BATCH_SIZE=16
CLAUDE__ANTHROPIC__1__BASE_URL=$ANTHROPIC_URL
CLAUDE__ANTHROPIC__1__API_KEY=sk-ant-mock
CLAUDE__ANTHROPIC__1__MODEL=claude-mock
OCR__MONKEY__1__BASE_URL=$OCR_URL
OCR__MONKEY__1__MODEL=monkeyocr
DOWN__OPENAI__1__BASE_URL=http://127.0.0.1:9/v1
DOWN__OPENAI__1__API_KEY=sk-mock-upstream
DOWN__OPENAI__1__MODEL=nowhere
DOWN__RETRY__MAX_ATTEMPTS=1
ENV
SOURCES="openai_1 backup_1 anthropic_1 monkey_1"

"$BIN" --env-file "$WORK/.env" serve >"$WORK/serve.out" 2>&1 &
SERVE=$!
PIDS+=($SERVE)
BASE=
for _ in $(seq 300); do
    BASE=$(sed -n 's/^polygateway serve: listening on \(http:\/\/[^ ]*\).*/\1/p' "$WORK/serve.out")
    [ -n "$BASE" ] && break
    kill -0 "$SERVE" 2>/dev/null || { cat "$WORK/serve.out"; exit 1; }
    sleep 0.1
done
[ -n "$BASE" ] || { cat "$WORK/serve.out"; exit 1; }
curl -fsS "$BASE/readyz" >/dev/null
step "server at $BASE"

# --- 1. the OpenAI SDK -------------------------------------------------------------------------
PGW_BASE_URL=$BASE PGW_UPSTREAM_URL=$LLM_URL PGW_ANTHROPIC_URL=$ANTHROPIC_URL PGW_KEY=$KEY PGW_LLM_ONLY_KEY=$LLM_ONLY_KEY PGW_LIMITED_KEY=$LIMITED_KEY \
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/openai_sdk/test_sdk.py" \
    "$ROOT/tests/openai_sdk/test_anthropic.py" "$ROOT/tests/openai_sdk/test_ingress.py" \
    "$ROOT/tests/openai_sdk/test_ingress_native.py"

# --- 2. the status page in a real browser ------------------------------------------------------
if [ -n "$CHROMIUM" ]; then
    chrome() {
        "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
            --disable-background-networking --disable-component-update --disable-sync \
            --user-data-dir="$(mktemp -d -p "$WORK")" "$@" 2>>"$WORK/chromium.log"
    }
    chrome --dump-dom "$BASE/" >"$WORK/status.html"
    for name in $SOURCES LLM EMBED OCR DOWN; do
        grep -q ">$name<\|>$name " "$WORK/status.html" \
            || { echo "openai_sdk: FAIL: the rendered status page does not show $name" >&2; exit 1; }
    done
    chrome --screenshot="$WORK/status.png" --window-size=1200,1400 "$BASE/" >/dev/null
    SIZE=$(stat -c %s "$WORK/status.png" 2>/dev/null || echo 0)
    [ "$SIZE" -gt 5000 ] || { echo "openai_sdk: FAIL: screenshot is $SIZE bytes" >&2; exit 1; }
    step "status page rendered by $("$CHROMIUM" --version 2>/dev/null | head -1): every source shown, screenshot $SIZE bytes"
fi

# --- 3. graceful shutdown ----------------------------------------------------------------------
kill -TERM "$SERVE"
wait "$SERVE"
grep -q "draining done" "$WORK/serve.out"
step "SIGTERM: drained and exited 0"
step "OK"
