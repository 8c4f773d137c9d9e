#!/usr/bin/env bash
# The long differential fuzz: tests/test_fuzz.py with many examples (default 5000 per property).
# Usage: scripts/fuzz.sh [examples]
set -euo pipefail
cd "$(dirname "$0")/.."
TDB_FUZZ_EXAMPLES=${1:-5000} python -m pytest tests/test_fuzz.py -q -p no:cacheprovider
