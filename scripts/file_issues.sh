#!/usr/bin/env bash
# Opens an issue for each file given (its first line the title, from its third line the body), unless an open
# issue has the same title: the same failure, or the same torch minor, is filed once while its issue is open.
# Used by .github/workflows/torch-watch.yml (the watch's issue-*.md files) and release.yml (a failed release);
# the rehearsals run it against a folder that stands in for the tracker.
#
# Usage: scripts/file_issues.sh FILE...
#        scripts/file_issues.sh --release-failed TAG   the issue of a failed release.yml run on TAG
# Env:   RUN_URL: the workflow run, added to each body; GH_TOKEN and GITHUB_REPOSITORY: gh's;
#        TDB_FORGE_DIR=DIR: DIR/issues/ stands in for the tracker (its *.md files are the open issues, first line
#        the title; an issue is filed as a new file there; a file removed is an issue closed), no gh.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

files=("$@")
if [ "${1:-}" = --release-failed ]; then
  tag=${2:?usage: scripts/file_issues.sh --release-failed TAG}
  cat > "$work/issue-release.md" <<TEXT
release: $tag failed, and may be published in part

release.yml failed on the tag $tag: PyPI may hold none, or only some, of its artifacts, and the docs site may be
the previous release's. Look at the failed job in the run below. A failure before the publish job published
nothing: fix the cause, then run release.yml again on the tag (\`gh workflow run release.yml --ref $tag\`, or
re-run the failed jobs). After the publish job, PyPI refuses the same files again: fix what failed (the docs site,
say) and re-run only those jobs. A post-release of the torch watch that is not on the index within hours also
leaves an issue of its own (scripts/torch_watch.py).
TEXT
  files=("$work/issue-release.md")
fi
[ ${#files[@]} -gt 0 ] || { echo "usage: scripts/file_issues.sh FILE... | --release-failed TAG" >&2; exit 2; }

if [ -n "${TDB_FORGE_DIR:-}" ]; then
  mkdir -p "$TDB_FORGE_DIR/issues"
  open=$(find "$TDB_FORGE_DIR/issues" -name '*.md' -exec head -n 1 {} \;)
else
  open=$(gh issue list --repo "$GITHUB_REPOSITORY" --state open --limit 1000 --json title --jq '.[].title')
fi
for file in "${files[@]}"; do
  title=$(head -n 1 "$file")
  if grep -Fxq -- "$title" <<< "$open"; then echo "already open: $title"; continue; fi
  { tail -n +3 "$file"; [ -z "${RUN_URL:-}" ] || printf '\nRun: %s\n' "$RUN_URL"; } > "$work/body.md"
  if [ -n "${TDB_FORGE_DIR:-}" ]; then
    n=$(( $(ls "$TDB_FORGE_DIR/issues" | wc -l) + 1 ))
    while [ -e "$TDB_FORGE_DIR/issues/$n.md" ]; do n=$((n + 1)); done
    { echo "$title"; echo; cat "$work/body.md"; } > "$TDB_FORGE_DIR/issues/$n.md"
  else
    gh issue create --repo "$GITHUB_REPOSITORY" --title "$title" --body-file "$work/body.md"
  fi
  echo "filed: $title"
  open+=$'\n'"$title"
done
