#!/usr/bin/env bash
# The README's first command: install what the app needs and start it on the embedded
# default (a local DuckDB file under ./data/).
source "$(dirname "$0")/lib.sh"
setup_app_env requirements.txt
setup_sglang_env
setup_tokenizer
log "starting the app on http://127.0.0.1:${BENCHDECK_APP_PORT:-8501} (DB: ${BENCHDECK_DB:-data/benchdeck.duckdb})"
exec .venv/bin/python scripts/serve_app.py \
  --server.address "${BENCHDECK_APP_ADDRESS:-127.0.0.1}" --server.port "${BENCHDECK_APP_PORT:-8501}"
