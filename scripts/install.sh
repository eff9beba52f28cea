#!/usr/bin/env bash
# `make install`: install what the app and the runner need, start nothing (docs/host.md).
# Debian packages (the CJK font for exported slides; nginx for the proxy) only as root;
# otherwise it says which are missing.  PYTHON=python3.11 picks the interpreter where the
# OS's python3 is another version.
source "$(dirname "$0")/lib.sh"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  log "Python 3.11 is required; $PYTHON is $("$PYTHON" -V 2>&1). Run: PYTHON=/path/to/python3.11 make install"
  exit 1
}
setup_app_env requirements.txt
setup_sglang_env
setup_router_env
setup_tokenizer
if [ "$(id -u)" = 0 ]; then
  setup_cjk_font
else
  [ -f "$CJK_FONT" ] || log "fonts-noto-cjk is missing (Japanese in exported slides): sudo apt-get install fonts-noto-cjk"
fi
log "installed; nothing started. Next: docs/host.md (env file, units, doctor)"
