#!/usr/bin/env bash
# The torch watch's release job (.github/workflows/torch-watch.yml): from the bundle its watch job made (the
# post-release commit and its tag), pushes the tag and a branch torch-watch/TAG holding that commit, starts
# release.yml on the tag (a tag pushed with the workflow's token starts no workflow by itself), then opens a pull
# request of the branch to main, so that the commit (its version and CHANGELOG entry) reaches main, not only the
# tag. The commit sits on the release it was built at: where main has moved on since, the pull request shows
# what to resolve. scripts/torch_watch_rehearsal.sh runs it against a local repository.
#
# Usage: scripts/torch_watch_release.sh BUNDLE TAG
# Env:   REMOTE (required): the repository to push to; BASE: the pull request's base (default main);
#        GH_TOKEN, GITHUB_REPOSITORY: gh's; TDB_FORGE_DIR=DIR: the workflow run and the pull request are written
#        to DIR/runs.log and DIR/pulls/ instead (the rehearsal), no gh.
set -euo pipefail
bundle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") tag=$2
: "${REMOTE:?REMOTE: the repository to push to}"
base=${BASE:-main} branch=torch-watch/$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git init -q "$work/repo" && cd "$work/repo"
git fetch -q "$bundle" "refs/tags/$tag:refs/tags/$tag"
commit=$(git rev-parse "$tag^{commit}")
git push -q "$REMOTE" "refs/tags/$tag" "$commit:refs/heads/$branch"
title=$(git log -1 --format=%s "$commit")
body="The torch watch released $tag from this commit ($(git log -1 --format=%h "$commit")), made on the release it
built the new torch's table at. Merging it brings its version and CHANGELOG entry to $base; where $base has
moved on since, keep $base's version and take the CHANGELOG entry."
if [ -n "${TDB_FORGE_DIR:-}" ]; then
  mkdir -p "$TDB_FORGE_DIR/pulls"
  echo "release.yml --ref $tag" >> "$TDB_FORGE_DIR/runs.log"
  printf '%s\n\nbase: %s, head: %s\n\n%s\n' "$title" "$base" "$branch" "$body" > "$TDB_FORGE_DIR/pulls/${branch//\//-}.md"
else
  gh workflow run release.yml --repo "$GITHUB_REPOSITORY" --ref "$tag"
  gh pr create --repo "$GITHUB_REPOSITORY" --base "$base" --head "$branch" --title "$title" --body "$body"
fi
echo "pushed $tag and $branch ($commit); release.yml started on $tag; pull request $branch -> $base opened"
