#!/usr/bin/env bash
# ruff (with bandit's security rules) and mypy, in one command.
source "$(dirname "$0")/lib.sh"
.venv/bin/ruff check .
.venv/bin/mypy --explicit-package-bases app.py pages runner db domain emulator bench tools tests
