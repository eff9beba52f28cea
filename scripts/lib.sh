# Shared by the set-up scripts: venvs that reinstall only when their requirements change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

# pip compiles every module it installs to bytecode, about 4 ms of CPU each (.venv-sglang has
# 18,000 of them).  PIP_COMPILE_FLAG=--no-compile leaves that to the first import of each
# module (written to the same __pycache__, so once): the test set-up asks for it for the
# environments it imports only a small part of.  `make install` compiles everything: on the
# host the service user may not be able to write there.
PIP_COMPILE_FLAG="${PIP_COMPILE_FLAG:-}"

log() { printf '\033[1m[benchdeck]\033[0m %s\n' "$*" >&2; }

# ensure_venv DIR STAMP_SOURCE... -- INSTALL COMMAND...
# Creates DIR with $PYTHON and runs the install command inside it, unless a stamp of the
# given files' content says this exact install already happened.
ensure_venv() {
  local dir="$1"; shift
  local sources=()
  while [ "$1" != "--" ]; do sources+=("$1"); shift; done
  shift
  local stamp="$dir/.benchdeck-installed"
  local want
  want="$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/python" ]; then
    return 0
  fi
  log "installing $dir (from ${sources[*]})"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$@"
  echo "$want" > "$stamp"
}

setup_app_env() {
  local reqs="${1:-requirements.txt}"
  ensure_venv .venv requirements.txt "$reqs" -- .venv/bin/python -m pip install -q -r "$reqs"
}

# SGLang lives in its own environment: it pins torch and CUDA packages.  The app never
# imports it; the runner calls it as a subprocess (bench_serving, schema extraction).
setup_sglang_env() {
  ensure_venv .venv-sglang requirements-sglang.txt -- bash -c '
    .venv-sglang/bin/python -m pip install -q $0 --no-deps "sglang==$(sed -n "s/^# sglang==//p" requirements-sglang.txt)" &&
    .venv-sglang/bin/python -m pip install -q $0 -r requirements-sglang.txt' "$PIP_COMPILE_FLAG"
}

# The host rehearsal: a real SGLang of a version benchdeck ships no schema for, its own
# package only, over the SGLang environment's dependencies (a .pth line to .venv-sglang's
# site-packages, resolved through a link), so the runner meets a "newer than the code" host.
setup_sglang_host_env() {
  ensure_venv .venv-sglang-host requirements-sglang-host.txt requirements-sglang.txt -- bash -c '
    base="$(cd .venv-sglang/lib/python3.11/site-packages && pwd -P)" &&
    echo "$base" > .venv-sglang-host/lib/python3.11/site-packages/zz_benchdeck_sglang_base.pth &&
    .venv-sglang-host/bin/python -m pip install -q $0 --no-deps \
      "sglang==$(sed -n "s/^# sglang==//p" requirements-sglang-host.txt)"' "$PIP_COMPILE_FLAG"
}

# AIPerf, for the importer's fixtures (tools/make_import_fixtures.py reads the same stamp).
setup_aiperf_env() {
  ensure_venv .venv-aiperf requirements-aiperf.txt -- \
    .venv-aiperf/bin/python -m pip install -q $PIP_COMPILE_FLAG -r requirements-aiperf.txt
}

setup_router_env() {
  ensure_venv .venv-router requirements-router.txt -- .venv-router/bin/python -m pip install -q -r requirements-router.txt
}

setup_tokenizer() {
  [ -f data/tokenizer/tokenizer.json ] || .venv/bin/python -m emulator.build_tokenizer data/tokenizer
}

# Japanese text in exported charts (vl-convert) and slides needs a CJK font on the machine.
CJK_FONT=/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
apt_install() {
  log "installing Debian packages: $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Emoji in run names, drawn in colour in the exported pictures (vl-convert reads the system fonts).
EMOJI_FONT=/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf

# debian_packages [PACKAGE...]: the named packages and the fonts (setup_cjk_font's), those not
# installed yet, with one apt-get update for all of them.
debian_packages() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ -f "$CJK_FONT" ] || missing+=(fonts-noto-cjk)
  [ -f "$EMOJI_FONT" ] || missing+=(fonts-noto-color-emoji)
  [ "${#missing[@]}" -eq 0 ] || apt_install "${missing[@]}"
}

# The fonts alone (debian_packages with no other package).
setup_cjk_font() {
  debian_packages
}
