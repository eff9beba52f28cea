#!/usr/bin/env bash
# The README's second command: install what the tests need and run the whole suite.
source "$(dirname "$0")/lib.sh"
setup_app_env requirements-dev.txt
setup_sglang_env
setup_router_env
setup_tokenizer
# The importer's fixtures: real bench_serving (two SGLang versions) and aiperf output.
bash scripts/setup_import_fixtures.sh
# A real browser for the page tests, and a CJK font so Japanese renders (Debian packages;
# Playwright cannot download its own browser here).
[ -x /usr/bin/chromium ] || apt_install chromium
setup_cjk_font
log "lint"
bash scripts/lint.sh
log "tests"
# Exit 5 (no tests collected) is a failure here, like any other non-zero exit.
.venv/bin/python -m pytest "$@"
