#!/usr/bin/env bash
# vLLM's argument parser, CPU-only, for the flag tests and the schema dump (issue 18).
#
# .venv-vllm holds a few light packages (below) and, under src/<version>/, the Python
# sources of each shipped vLLM wheel, unpacked from the real wheel downloaded without its
# dependencies. No compiled extension, torch or CUDA package is installed: the dump and
# the parser server (runner/vllm_side/schema_dump.py, runner/vllm_side/argparse_server.py)
# stub what cannot import and list it. Cost: two wheel downloads (~340 and ~370 MB),
# cached in $BENCHDECK_WHEEL_CACHE (default ~/.cache/benchdeck/wheels) so a second run
# downloads nothing; unpacking the .py files takes a few seconds per version.
#
#   bash scripts/setup_vllm_env.sh            # the shipped versions
#   bash scripts/setup_vllm_env.sh 0.34.0     # another one (then dump its schema)
source "$(dirname "$0")/lib.sh"

# The versions whose schemas ship in domain/flags/schemas/vllm_args_<version>.json.
VLLM_VERSIONS=(0.11.2 0.33.0)
VLLM_LIGHT_DEPS=(pydantic==2.14.4 PyYAML==6.0.4 regex==2026.11.19 packaging typing_extensions)
WHEEL_CACHE="${BENCHDECK_WHEEL_CACHE:-$HOME/.cache/benchdeck/wheels}"

setup_vllm_venv() {
  ensure_venv .venv-vllm scripts/setup_vllm_env.sh -- \
    .venv-vllm/bin/python -m pip install -q "${VLLM_LIGHT_DEPS[@]}"
  # Not in .gitignore's list: the directory ignores itself.
  echo '*' > .venv-vllm/.gitignore
}

# unpack_vllm VERSION: the wheel's .py sources and metadata into .venv-vllm/src/VERSION.
unpack_vllm() {
  local version="$1" dest=".venv-vllm/src/$1"
  [ -f "$dest/vllm/__init__.py" ] && return 0
  mkdir -p "$WHEEL_CACHE"
  local wheel
  wheel="$(ls "$WHEEL_CACHE"/vllm-"$version"-*.whl 2>/dev/null | head -1 || true)"
  if [ -z "$wheel" ]; then
    log "downloading vllm==$version (no dependencies)"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: "vllm==$version" -d "$WHEEL_CACHE"
    wheel="$(ls "$WHEEL_CACHE"/vllm-"$version"-*.whl | head -1)"
  fi
  log "unpacking the Python sources of $wheel"
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  "$PYTHON" - "$wheel" "$dest.partial" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    keep = [n for n in z.namelist() if n.endswith((".py", ".json", ".jinja")) or ".dist-info/" in n]
    z.extractall(dest, keep)
PY
  mv "$dest.partial" "$dest"
}

setup_vllm_env() {
  setup_vllm_venv
  local version
  for version in "${@:-${VLLM_VERSIONS[@]}}"; do
    unpack_vllm "$version"
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  setup_vllm_env "$@"
fi
