#!/usr/bin/env bash
# Lints every GitHub Actions workflow in .github/workflows/ (a new one is linted without touching this script):
#   - check-jsonschema with its built-in GitHub workflow schema (SchemaStore's, shipped in the wheel): keys,
#     types and values GitHub accepts;
#   - zizmor, static security analysis, with its pedantic persona (template injection, credentials left in a
#     checkout, unpinned actions and images, permissions): each finding is fixed, or ignored in
#     .github/zizmor.yml with the reason. With GH_TOKEN set (the release workflow's lint job) it also runs the
#     audits that ask GitHub's API: each pinned commit belongs to its action's repository (impostor-commit),
#     known vulnerable actions, refs that name both a tag and a branch; without it (.ci/run), offline.
# Both pinned, from the registry, in their own venv (.venv-lint, kept between runs). Used by .ci/run, the release
# workflow's lint job and scripts/release_rehearsal.sh. Exit status: non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
ZIZMOR=1.32.0
CHECK_JSONSCHEMA=0.39.0

venv=${TDB_LINT_VENV:-$PWD/.venv-lint}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "zizmor==$ZIZMOR" \
  "check-jsonschema==$CHECK_JSONSCHEMA"

shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
[ ${#workflows[@]} -gt 0 ] || { echo "lint_workflows: no workflow in .github/workflows/" >&2; exit 1; }
echo "check-jsonschema $CHECK_JSONSCHEMA, zizmor $ZIZMOR on: ${workflows[*]}"
"$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows "${workflows[@]}"
offline=(--offline)
[ -z "${GH_TOKEN:-}" ] || offline=()  # zizmor reads the token from GH_TOKEN
"$venv/bin/zizmor" ${offline[@]+"${offline[@]}"} --no-progress --persona=pedantic --config .github/zizmor.yml \
  "${workflows[@]}"
