#!/usr/bin/env bash
# The README's first command: install what the app needs and start it on the embedded
# default (a local DuckDB file under ./data/), with a runner beside it.  Without
# BENCHDECK_SGLANG_PYTHON the runner is in demo mode: it serves emulator runs only,
# measured with the real bench_serving client.
source "$(dirname "$0")/lib.sh"
setup_app_env requirements.txt
setup_sglang_env
setup_router_env
setup_tokenizer
setup_cjk_font
mkdir -p data
log "starting the runner ($([ -n "${BENCHDECK_SGLANG_PYTHON:-}" ] && echo "SGLang: $BENCHDECK_SGLANG_PYTHON" || echo "demo mode: emulator runs only")); log: data/runner.log"
.venv/bin/python -m runner serve >>data/runner.log 2>&1 &
runner_pid=$!
# One signal to the runner is a warm stop: it finishes the current point and requeues the run.
trap 'kill -TERM "$runner_pid" 2>/dev/null; wait "$runner_pid" 2>/dev/null' EXIT
log "starting the app on http://${BENCHDECK_APP_ADDRESS:-127.0.0.1}:${BENCHDECK_APP_PORT:-8501} (DB: ${BENCHDECK_DB:-data/benchdeck.duckdb})"
.venv/bin/python scripts/serve_app.py \
  --server.address "${BENCHDECK_APP_ADDRESS:-127.0.0.1}" --server.port "${BENCHDECK_APP_PORT:-8501}"
