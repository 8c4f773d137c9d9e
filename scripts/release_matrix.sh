#!/usr/bin/env bash
# release.yml's wheel-matrix jobs, read from the index by scripts/torch_versions.py (no torch version is written
# by hand in the workflow): prints the JSON, and writes it as `include=` to GITHUB_OUTPUT where set (the matrix
# job hands it to the wheel-matrix job's `fromJSON`). Also run by scripts/release_rehearsal.sh and
# scripts/torch_watch_rehearsal.sh against their local index.
#
# Usage: scripts/release_matrix.sh   (the index: PIP_INDEX_URL, else PyPI)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(python3 "$repo/scripts/torch_versions.py" --release-matrix)
echo "$jobs"
[ -z "${GITHUB_OUTPUT:-}" ] || echo "include=$jobs" >> "$GITHUB_OUTPUT"
