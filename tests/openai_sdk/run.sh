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
#      source of every scope, and a screenshot must be produced; then the live dashboard (its
#      script run by the browser) must hold chart data for every scope, and an outage injected
#      on the FLAKY scope (its mock upstream killed) must show in `status.json` within 2 s as an
#      error spike with its reason and a breaker timeline entry, then in the browser's DOM;
#      screenshots are kept in $PGW_SCREENSHOT_DIR (default: <target>/dashboard-screenshots);
#   3. SIGTERM shuts the server down gracefully (exit code 0).
# The server is the debug `polygateway` binary (feature full); the mock upstreams are the test
# kit's `polygateway-mock`.
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
# `.ci/run` passes the binaries its workspace build made (PGW_TEST_CLI, PGW_TEST_MOCK); otherwise
# build them here, in one invocation so the library compiles once.
if [ -n "${PGW_TEST_CLI:-}" ] && [ -n "${PGW_TEST_MOCK:-}" ]; then
    BIN=$PGW_TEST_CLI
    MOCK=$PGW_TEST_MOCK
else
    (cd "$ROOT" && cargo build --quiet --features full --bin polygateway --bin polygateway-mock)
    BIN=$TARGET/debug/polygateway
    MOCK=$TARGET/debug/polygateway-mock
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
"$MOCK" --chunks 6 >"$WORK/mock.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q OCR_BASE_URL "$WORK/mock.out" && break; sleep 0.1; done
# A second mock, FLAKY's only upstream: killed later to inject an outage.
: >"$WORK/flaky.out"
"$MOCK" --chunks 2 >"$WORK/flaky.out" 2>&1 &
FLAKY_MOCK=$!
PIDS+=($FLAKY_MOCK)
for _ in $(seq 100); do grep -q OCR_BASE_URL "$WORK/flaky.out" && break; sleep 0.1; done
FLAKY_URL=$(sed -n 's/^LLM_BASE_URL=//p' "$WORK/flaky.out")
[ -n "$FLAKY_URL" ] || { cat "$WORK/flaky.out"; exit 1; }
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
FLAKY__OPENAI__1__BASE_URL=$FLAKY_URL
FLAKY__OPENAI__1__API_KEY=sk-mock-upstream
FLAKY__OPENAI__1__MODEL=mock-model
FLAKY__OPENAI__1__MAX_CONCURRENCY=1
FLAKY__RETRY__MAX_ATTEMPTS=1
FLAKY__BREAKER__FAIL_THRESHOLD=2
# A loopback test server: the dashboard's operator data without typing an admin key into the
# headless browser (the key flow itself is tests/server_dashboard.rs's).
PGW_SERVER_PUBLIC_STATUS=true
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

    # --- 2b. the live dashboard under faults ----------------------------------------------------
    SHOTS=${PGW_SCREENSHOT_DIR:-$TARGET/dashboard-screenshots}
    mkdir -p "$SHOTS"
    chat() {
        curl -sS -o /dev/null -w '%{http_code}' "$BASE/v1/chat/completions" -H "Authorization: Bearer $KEY" \
            -H 'content-type: application/json' \
            -d "{\"model\": \"$1\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"
    }
    # A call on every scope, so every scope's charts have points in the 5-minute range.
    for scope in LLM CLAUDE FLAKY FLAKY DOWN; do chat "$scope" >/dev/null; done
    curl -sS -o /dev/null "$BASE/v1/embeddings" -H "Authorization: Bearer $KEY" -H 'content-type: application/json' \
        -d '{"model": "EMBED", "input": ["a", "b"]}'
    printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body' >"$WORK/page.png"
    curl -sS -o /dev/null "$BASE/ocr/text?model=OCR" -H "Authorization: Bearer $KEY" -F "file=@$WORK/page.png"
    dashboard_dom() {
        chrome --virtual-time-budget=4000 --dump-dom "$BASE/" >"$WORK/dashboard.html"
    }
    dashboard_dom
    # Every scope: its calls chart has points, and so has one of its sources' pacer/in-flight
    # charts (an attempt was in flight during some second).
    "$VENV/bin/python" - "$WORK/dashboard.html" <<'PY' || { echo "openai_sdk: FAIL: a scope's dashboard charts hold no data" >&2; exit 1; }
import re, sys
dom = open(sys.argv[1]).read()
for scope in ["LLM", "CLAUDE", "FLAKY", "DOWN", "EMBED", "OCR"]:
    calls = re.search(r'id="calls-%s" data-points="(\d+)"' % scope, dom)
    assert calls and int(calls.group(1)) > 0, "%s: calls chart %s" % (scope, calls and calls.group(0))
    pacer = [int(n) for n in re.findall(r'id="pacer-%s-[^"]+" data-points="(\d+)"' % scope, dom)]
    assert any(pacer), "%s: pacer charts %s" % (scope, pacer)
print("chart data for every scope")
PY
    chrome --virtual-time-budget=4000 --screenshot="$SHOTS/dashboard.png" --window-size=1400,8000 "$BASE/" >/dev/null
    step "dashboard: chart data for every scope, screenshot $SHOTS/dashboard.png"

    # The outage: FLAKY's upstream goes away; its calls fail (connection refused) and open its
    # breaker (FAIL_THRESHOLD=2). status.json must show both within 2 s.
    kill "$FLAKY_MOCK"; wait "$FLAKY_MOCK" 2>/dev/null || true
    T0=$(date +%s%N)
    for _ in 1 2 3; do chat FLAKY >/dev/null; done
    SEEN=
    while [ $(( ($(date +%s%N) - T0) / 1000000 )) -le 2000 ]; do
        curl -sS "$BASE/status.json?range=60" >"$WORK/status.json"
        if "$VENV/bin/python" - "$WORK/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["series"]["scopes"]["FLAKY"]
failed = sum(sum(v) for k, v in s["calls"].items() if k != "ok")
opened = any(c["to"] == "open" for c in s["sources"]["openai_1"]["breaker"])
sys.exit(0 if failed >= 3 and opened else 1)
PY
        then SEEN=$(( ($(date +%s%N) - T0) / 1000000 )); break; fi
        sleep 0.1
    done
    [ -n "$SEEN" ] || { echo "openai_sdk: FAIL: the outage is not in status.json within 2 s: $(cat "$WORK/status.json")" >&2; exit 1; }
    dashboard_dom
    # FLAKY's errors chart has points and names the reason in its legend; its source's breaker
    # timeline lists the change to open.
    "$VENV/bin/python" - "$WORK/dashboard.html" <<'PY' || { echo "openai_sdk: FAIL: the outage is not on the rendered dashboard" >&2; exit 1; }
import re, sys
dom = open(sys.argv[1]).read()
chart = re.search(r'id="errors-FLAKY" data-points="(\d+)".*?<div class="legend">(.*?)</div>', dom, re.S)
assert chart and int(chart.group(1)) > 0, "no error spike on FLAKY's errors chart"
reasons = re.findall(r'(retry_exhausted|circuit_open|no_sources)', chart.group(2))
assert reasons, "the errors chart names no reason: " + chart.group(2)
timeline = re.search(r'id="breaker-FLAKY-openai_1".*?</ul>', dom, re.S)
assert timeline and 'data-to="open"' in timeline.group(0), "no breaker timeline entry"
print("reasons on the chart:", sorted(set(reasons)))
PY
    chrome --virtual-time-budget=4000 --screenshot="$SHOTS/dashboard-outage.png" --window-size=1400,8000 "$BASE/" >/dev/null
    step "outage in status.json after ${SEEN} ms (error spike with reason, breaker opened); DOM agrees; screenshot $SHOTS/dashboard-outage.png"
fi

# --- 3. graceful shutdown ----------------------------------------------------------------------
kill -TERM "$SERVE"
wait "$SERVE"
grep -q "draining done" "$WORK/serve.out"
step "SIGTERM: drained and exited 0"
step "OK"
