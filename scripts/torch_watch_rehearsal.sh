#!/usr/bin/env bash
# The torch watch (scripts/torch_watch.py, run daily by .github/workflows/torch-watch.yml) rehearsed end to end on
# this machine against a local index: pypiserver on 127.0.0.1 serving a folder, into which "publishing" copies a
# file; a folder stands in for GitHub's issues and pull requests (TDB_FORGE_DIR: scripts/file_issues.sh and
# scripts/torch_watch_release.sh write there instead of calling gh), a bare repository for the pushes. Opt-in, like
# scripts/release_rehearsal.sh (about 20 min on 2 cores; torch wheels are cached). Cases, in order, each on the
# index the one before left; every issue the watch leaves is filed as the workflow's report job files it:
#   first    no release of this package on the index yet (torch 2.13.0 and 2.14.1): the watch leaves the issue
#            "torch 2.14 is out; no wheel of this project covers it" (how to release by hand), builds nothing,
#            exit status 1; run again (the next day), the same issue is not filed twice
#   covered  the index holds torch 2.13.0 and 2.14.1 and this package's release 0.1.0, built by scripts/build_wheels.sh
#            with the torch versions scripts/torch_versions.py reads from that index (so it covers 2.13 and 2.14),
#            tagged v0.1.0: the watch finds nothing to do
#   new      torch 2.15.0 added: the watch finds it, builds its table at v0.1.0 with that tag's build_wheels.sh,
#            passes its scripts/wheel_matrix.sh row (CPython 3.11: the main job and the smoke tests, no compiler at
#            import) and prepares v0.1.0.post1 (version, CHANGELOG entry, tag); the release job's script
#            (scripts/torch_watch_release.sh) pushes the tag and the branch torch-watch/v0.1.0.post1 to a bare
#            repository and writes its pull request to main; release.yml's rows (scripts/release_matrix.sh) now
#            name 2.15.0
#   late     the tag v0.1.0.post1 is there but the index does not hold it: within --publish-hours the watch waits
#            (exit status 0); past them (--publish-hours 0) it leaves the issue "v0.1.0.post1 was tagged ... and is
#            not on the index"; then, as release.yml would on that tag, the x86_64 wheel is built there
#            (build_wheels.sh: 2.13.0, 2.14.1, 2.15.0 from the index), checked (scripts/release_check.sh --tag) and
#            published (copied onto the index)
#   other    a "torch 2.16.0" with a Linux wheel for CPython 3.14 only: the watch finds the minor (not "nothing to
#            do"), and the build, which needs CPython 3.11's torch, fails and leaves its issue
#   broken   that file replaced by a "torch 2.16.0" for CPython 3.11: 2.15.0's wheel re-versioned, with a field
#            planted before THPVariable's tensor in torch/csrc/autograd/python_variable.h (as a torch that moved
#            it): the build fails, the issue holds the compiler's message, and no tag is made and nothing published
#   release-failed  a release.yml step failing on the tag (release_check.sh --tag of another version): its report
#            job's issue (scripts/file_issues.sh --release-failed), filed once however often it fails
# torch's test channel is not reachable from here: the watch runs without it (--test-channel ''); its decisions
# are in tests/test_torch_watch.py. Everything runs in a clone of HEAD (the tags are made there).
# Results: the section "Torch watch rehearsal" of scripts/release_rehearsal.md (TDB_WATCH_REHEARSAL_OUT), rewritten.
#
# Usage: scripts/torch_watch_rehearsal.sh
# Env:   TDB_RELEASE_CACHE (as scripts/build_wheels.sh: where torch wheels downloaded from PyPI are kept)
# Needs: python3 with venv, CPython 3.11 (pyenv's or on PATH), a C++ compiler, git, curl, about 15 GB free.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${TDB_WATCH_REHEARSAL_OUT:-$repo/scripts/release_rehearsal.md}
downloads=${TDB_RELEASE_CACHE:-$HOME/.cache/torch_dlpack_bridge-release}/wheels
work=$(mktemp -d /tmp/tdb-watch-rehearsal.XXXXXX)
server_pid=
cleanup() {
  [ -z "$server_pid" ] || { kill "$server_pid" 2> /dev/null; wait "$server_pid" 2> /dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "torch watch rehearsal: $*" >&2; exit 1; }
step() { echo "== $(date -u +%H:%M:%S) $*"; }
started=$SECONDS

git clone -q "$repo" "$work/src" || die "cloning $repo failed"
src=$work/src
commit=$(git -C "$src" rev-parse --short HEAD)
version=$(sed -n 's/^PACKAGE_VERSION = "\([^"]*\)".*/\1/p' "$src/torch_dlpack_bridge/_build.py")
git -C "$src" tag "v$version"
forge=$work/forge && mkdir -p "$forge"  # GitHub's issues and pull requests
git init -q --bare "$work/github.git"  # GitHub's repository, for the release job's pushes

step "tools: pypiserver and the build's tools into a venv; torch 2.13.0, 2.14.1, 2.15.0 wheels (cached)"
python3 -m venv "$work/tools" && "$work/tools/bin/pip" install -q pypiserver "setuptools>=77" wheel auditwheel ||
  die "installing the tools failed"
export PATH=$work/tools/bin:$PATH
mkdir -p "$downloads" "$work/index"
torch_wheel() {  # torch_wheel VERSION -> its cp311 x86_64 wheel, downloaded once into the release cache
  local found
  found=$(ls "$downloads"/torch-"$1"[-+]*cp311-cp311*x86_64.whl 2> /dev/null | head -n 1)
  if [ -z "$found" ]; then
    pip download -q --no-deps --only-binary=:all: --python-version 3.11 "torch==$1" -d "$downloads" >&2 || return 1
    found=$(ls "$downloads"/torch-"$1"[-+]*cp311-cp311*x86_64.whl | head -n 1)
  fi
  echo "$found"
}
publish() { ln -f "$1" "$work/index/" 2> /dev/null || cp "$1" "$work/index/"; }  # onto the local index
for v in 2.13.0 2.14.1; do publish "$(torch_wheel $v)" || die "no torch $v wheel"; done
torch215=$(torch_wheel 2.15.0) || die "no torch 2.15.0 wheel"

port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pypi-server run -i 127.0.0.1 -p "$port" "$work/index" > "$work/server.log" 2>&1 &
server_pid=$!
index=http://127.0.0.1:$port/simple/
for _ in $(seq 600); do  # until it answers (or has died)
  curl -sf "$index" > /dev/null && break
  kill -0 "$server_pid" 2> /dev/null || { cat "$work/server.log"; die "pypiserver did not start"; }
  sleep 0.1
done
# The index's torch comes from here; PyPI serves only what the row's torch needs besides (CUDA libraries, numpy).
export PIP_INDEX_URL=$index PIP_EXTRA_INDEX_URL=https://pypi.org/simple TDB_RELEASE_CACHE=$work/release-cache
served() {  # served PAGE PREFIX: the files the index lists on that project's page
  curl -sf "$index$1/" | grep -oE "$2-[0-9][^\"#<]*\.(whl|tar\.gz)" | sort -u | paste -sd' ' -
}
results=$work/results.md && : > "$results"
PROJECT_NAME=torch_dlpack_bridge

watch() {  # watch CASE [ARG...]: the watch once, its output in $work/CASE/watch.log, then the report job's
  local rc case=$1 issues  # filing of its issues (into $forge); the watch's exit status
  shift
  mkdir -p "$work/$case"
  python "$src/scripts/torch_watch.py" --out "$work/$case" --test-channel '' --repo "$src" "$@" \
    > "$work/$case/watch.log" 2>&1
  rc=$?
  grep -E '^(torch watch|== torch watch)' "$work/$case/watch.log"
  issues=$(ls "$work/$case"/issue-*.md 2> /dev/null)
  # shellcheck disable=SC2086  # one argument per file
  [ -z "$issues" ] || TDB_FORGE_DIR=$forge RUN_URL="(rehearsal: $case)" "$src/scripts/file_issues.sh" $issues \
    > "$work/$case/filed.log" 2>&1
  return $rc
}
filed() { cat "$work/$1/filed.log" 2> /dev/null; }  # filed CASE: what the report job did
record() { printf '%s\n' "$@" >> "${record_to:-$results}"; }

step "first: no release of this package on the index; the watch, twice"
t0=$SECONDS
watch first; rc=$?
watch first-again; rc2=$?
ok=$([ $rc = 1 ] && [ $rc2 = 1 ] && [ -f "$work/first/issue-torch-2.14.md" ] &&
     grep -qx 'filed: torch 2.14 is out; no wheel of this project covers it' "$work/first/filed.log" &&
     grep -qx 'already open: torch 2.14 is out; no wheel of this project covers it' "$work/first-again/filed.log" &&
     [ ! -e "$work/first/release.env" ] && [ "$(git -C "$src" tag | paste -sd' ' -)" = "v$version" ] &&
     echo pass || echo FAIL)
record "### first: $ok" "" "The index: $(served torch torch); no $PROJECT_NAME yet. The watch (exit status $rc, then" \
  "$rc2 the next time; $((SECONDS - t0)) s for both):" '```' "$(grep -E '^torch watch' "$work/first/watch.log")" '```' "" \
  "The issue it leaves (\`issue-torch-2.14.md\`), and what the report job did each time:" '~~~' \
  "$(cat "$work/first/issue-torch-2.14.md" 2> /dev/null)" '~~~' '```' "$(filed first)" "$(filed first-again)" '```' ""

step "covered: release $version built from the index (torch $(served torch torch)) and published; the watch"
t0=$SECONDS
TDB_WHEEL_DIR=$work/dist-$version "$src/scripts/build_wheels.sh" > "$work/release-$version.log" 2>&1 ||
  { tail -n 30 "$work/release-$version.log"; die "building release $version failed"; }
publish "$work/dist-$version"/*.whl
release_s=$((SECONDS - t0)) t0=$SECONDS
tags_before=$(git -C "$src" tag | paste -sd' ' -)
watch covered; rc=$?
ok=$([ $rc = 0 ] && grep -q 'nothing to do$' "$work/covered/watch.log" && [ ! -e "$work/covered/release.env" ] &&
     [ "$(git -C "$src" tag | paste -sd' ' -)" = "$tags_before" ] && echo pass || echo FAIL)
record "### covered: $ok" "" "The index: $(served torch torch); $(served torch-dlpack-bridge torch_dlpack_bridge)" \
  "(built from it in ${release_s} s). The watch (exit status $rc, $((SECONDS - t0)) s):" '```' \
  "$(grep -E '^torch watch' "$work/covered/watch.log")" '```' ""

step "new: torch 2.15.0 published; the watch"
publish "$torch215"
t0=$SECONDS
watch new; rc=$?
watch_s=$((SECONDS - t0))
tag=$(sed -n 's/^TAG=//p' "$work/new/release.env" 2> /dev/null)
tree=$(sed -n 's/^WORKTREE=//p' "$work/new/release.env" 2> /dev/null)
row=$(grep -E '^\| x86_64 \| 2\.15\.0 \| 3\.11 ' "$work/new/wheel_matrix-2.15.0.md" 2> /dev/null)
installed=$(grep -ohE 'installed in [0-9]+ s' "$work/new/matrix-2.15.0"/*.log 2> /dev/null | head -n 1)
ok=FAIL release=("No release was prepared.") timing="" late_ok=FAIL
if [ $rc = 0 ] && [ -n "$tag" ] && echo "$row" | grep -q '| pass |'; then
  step "new: the release job (scripts/torch_watch_release.sh) and release.yml's rows (scripts/release_matrix.sh)"
  git -C "$src" bundle create "$work/new/release.bundle" "refs/tags/$tag" 2> /dev/null
  REMOTE=$work/github.git TDB_FORGE_DIR=$forge "$src/scripts/torch_watch_release.sh" "$work/new/release.bundle" \
    "$tag" > "$work/new/release-job.log" 2>&1
  pushed=$(git -C "$work/github.git" show-ref | sed "s|^\([0-9a-f]\{7\}\)[0-9a-f]* | \1 |" | paste -sd';' -)
  pull=$forge/pulls/torch-watch-$tag.md
  "$src/scripts/release_matrix.sh" > "$work/new/matrix.json" 2> "$work/new/matrix.log"
  rows=$(python - "$work/new/matrix.json" 2> /dev/null <<'PY'
import json, sys
print("; ".join(f"{job['arch']} on CPython {job['python']}: {job['rows']}" for job in json.load(open(sys.argv[1]))))
PY
  )
  job_ok=$([ "$(git -C "$work/github.git" rev-parse "refs/heads/torch-watch/$tag" 2> /dev/null)" = \
             "$(git -C "$src" rev-parse "$tag^{commit}")" ] && [ -f "$pull" ] && grep -q "base: main" "$pull" &&
           grep -qx "release.yml --ref $tag" "$forge/runs.log" && [[ "$rows" == *2.15.0* ]] && echo pass || echo FAIL)

  step "late: $tag is tagged and not on the index; the watch within the hours, then past them"
  t0=$SECONDS
  watch late-waiting; rc_wait=$?
  watch late --publish-hours 0; rc_late=$?
  late_s=$((SECONDS - t0))
  late_issue=$(ls "$work/late"/issue-"$tag".md 2> /dev/null)
  record_to=$work/late.md  # after the new case's section
  late_ok=$([ $rc_wait = 0 ] && grep -q "already tagged: waiting" "$work/late-waiting/watch.json" && [ $rc_late = 1 ] &&
            [ -n "$late_issue" ] && grep -q "^filed: torch watch: $tag was tagged" "$work/late/filed.log" &&
            echo pass || echo FAIL)
  record "### late: $late_ok" "" "The tag $tag with no $tag on the index: the watch within \`--publish-hours\`" \
    "(exit status $rc_wait), then past them (\`--publish-hours 0\`, exit status $rc_late); $late_s s for both:" '```' \
    "$(grep -E '^torch watch' "$work/late-waiting/watch.log")" \
    "$(python -c 'import json, sys; print("torch watch (watch.json): " + json.load(open(sys.argv[1]))["acted"][0]["result"])' \
       "$work/late-waiting/watch.json" 2> /dev/null)" \
    "$(grep -E '^torch watch' "$work/late/watch.log")" "$(filed late)" '```' "" \
    "The issue:" '~~~' "$(cat "$late_issue" 2> /dev/null)" '~~~' ""
  record_to=

  step "new: the wheel the release would publish, built at $tag from the index, checked, published"
  t0=$SECONDS
  (cd "$tree" && TDB_WHEEL_DIR=$work/dist-$tag scripts/build_wheels.sh) > "$work/release-$tag.log" 2>&1 &&
    env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL "$tree/scripts/release_check.sh" "$work/dist-$tag" --tag "$tag" \
      > "$work/check-$tag.log" 2>&1 && publish "$work/dist-$tag"/*.whl && ok=pass
  wheel_s=$((SECONDS - t0))
  [ $ok = pass ] || tail -n 30 "$work/release-$tag.log" "$work/check-$tag.log"
  wheel=$(ls "$work/dist-$tag"/torch_dlpack_bridge-*.whl)
  holds=$(python - "$wheel" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
libs = [n.rsplit("/", 1)[1] for n in z.namelist() if "/_lib/" in n and n.endswith(".so")]
record = z.read("torch_dlpack_bridge/_lib/torch_versions.txt").decode().split()
print(", ".join(libs), "and records torch", ", ".join(record))
PY
  )
  read -r build_s row_s < <(python -c 'import json, sys; done = json.load(open(sys.argv[1]))["acted"][0]
print(round(done["build_s"]), round(done["row_s"]))' "$work/new/watch.json")
  timing="From torch 2.15.0 on the index to its table built and tested, the release tagged and its wheel built and
checked: $((watch_s + wheel_s)) s. The watch $watch_s s (the table $build_s s, the wheel-matrix row $row_s s, finding
the torch and the release, the commit and the tag the rest), then the release's wheel $wheel_s s. On GitHub add the
wait for the daily schedule and release.yml's own run (every minor, both architectures, its matrix rows)."
  release=("The release: $(git -C "$src" log -1 --format='commit %h "%s"' "$tag"), tagged $tag on v$version"
           "($(git -C "$src" diff --shortstat "v$version" "$tag" | sed 's/^ *//')). At $tag, as release.yml would,"
           "the wheel built in $wheel_s s ($(grep -oE 'built [0-9]+ table libraries in [0-9]+ s' \
             "$work/release-$tag.log")) and checked by \`release_check.sh --tag $tag\`"
           "($(tail -n 1 "$work/check-$tag.log"))."
           "\`$(basename "$wheel")\` holds $holds.")
fi
[ "${job_ok:-FAIL}" = pass ] || ok=FAIL
record "### new: $ok" "" "$timing" "" "The watch (exit status $rc, ${watch_s} s in all):" '```' \
  "$(grep -E '^(torch watch|== torch watch)' "$work/new/watch.log")" '```' "" \
  "Its wheel-matrix row (the venv with torch and the wheel $installed):" "" \
  "$(sed -n '/^| arch/,/^|---/p' "$work/new/wheel_matrix-2.15.0.md" 2> /dev/null)" "$row" "" "${release[@]}" "" \
  "Its CHANGELOG entry:" '```' \
  "$(git -C "$src" show "$tag:CHANGELOG.md" 2> /dev/null | sed -n '/^## .*post/,/^## /p' | sed '$d')" '```' "" \
  "The release job (\`scripts/torch_watch_release.sh\`, $job_ok): what it printed, what the bare repository standing" \
  "in for GitHub then holds, the workflow it started, and its pull request:" '```' \
  "$(cat "$work/new/release-job.log" 2> /dev/null)" "refs: $pushed" "runs: $(cat "$forge/runs.log" 2> /dev/null)" \
  '```' '~~~' "$(cat "$pull" 2> /dev/null)" '~~~' "" \
  "release.yml's wheel-matrix jobs, from this index (\`scripts/release_matrix.sh\`): $rows." ""
[ -f "$work/late.md" ] && cat "$work/late.md" >> "$results" || record "### late: FAIL" "" "Not run: no release was prepared." ""

step "other: a torch 2.16.0 with a Linux wheel for CPython 3.14 only; the watch"
other=$work/torch-2.16.0-cp314-cp314-manylinux_2_28_x86_64.whl
cp "$torch215" "$other" && publish "$other"
t0=$SECONDS
watch other; rc=$?
ok=$([ $rc = 1 ] && grep -q 'new: 2.16.0$' "$work/other/watch.log" && [ -f "$work/other/issue-2.16.0.md" ] &&
     [ ! -e "$work/other/release.env" ] && echo pass || echo FAIL)
record "### other: $ok" "" "The watch (exit status $rc, $((SECONDS - t0)) s):" '```' \
  "$(grep -E '^(torch watch|== torch watch)' "$work/other/watch.log")" "$(filed other)" '```' "" \
  "Its issue's title and errors (\`issue-2.16.0.md\`):" '~~~' \
  "$(sed '/^End of its output:/,$d' "$work/other/issue-2.16.0.md" 2> /dev/null)" '~~~' ""
rm -f "$work/index/$(basename "$other")"

step "broken: a fake torch 2.16.0 with a planted header published; the watch"
fake=$work/torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl
python - "$torch215" "$fake" <<'PY' || die "making the fake torch 2.16.0 failed"
import re, sys, zipfile
source, dest = sys.argv[1:]
keep = ("torch/include/", "torch/share/cmake/", "torch/version.py", "torch/lib/libc10.so", "torch/lib/libtorch_cpu.so",
        "torch/lib/libtorch_python.so", "torch-2.15.0.dist-info/METADATA", "torch-2.15.0.dist-info/WHEEL")
with zipfile.ZipFile(source) as z, zipfile.ZipFile(dest, "w") as out:
    for info in z.infolist():
        if not info.filename.startswith(keep):
            continue
        data = z.read(info)
        name = info.filename.replace("torch-2.15.0.dist-info", "torch-2.16.0.dist-info")
        if name.endswith(("version.py", "/METADATA")):
            data = data.replace(b"2.15.0", b"2.16.0")
        if name == "torch/include/torch/csrc/autograd/python_variable.h":
            planted = b"  PyObject* planted = nullptr;  // scripts/torch_watch_rehearsal.sh\n"
            data = data.replace(b"  // Payload\n", planted + b"  // Payload\n", 1)
            assert b"planted" in data
        out.writestr(name, data, zipfile.ZIP_STORED if name.endswith(".so") else zipfile.ZIP_DEFLATED)
PY
publish "$fake"
packages_before=$(served torch-dlpack-bridge torch_dlpack_bridge) tags_before=$(git -C "$src" tag | paste -sd' ' -)
t0=$SECONDS
watch broken; rc=$?
issue=$work/broken/issue-2.16.0.md
ok=$([ $rc = 1 ] && grep -q "THPVariable's tensor moved" "$issue" 2> /dev/null && [ ! -e "$work/broken/release.env" ] &&
     [ "$(served torch-dlpack-bridge torch_dlpack_bridge)" = "$packages_before" ] &&
     [ "$(git -C "$src" tag | paste -sd' ' -)" = "$tags_before" ] && echo pass || echo FAIL)
record "### broken: $ok" "" "The watch (exit status $rc, $((SECONDS - t0)) s):" '```' \
  "$(grep -E '^(torch watch|== torch watch)' "$work/broken/watch.log")" '```' "" \
  "The issue it leaves for the workflow to open (\`issue-2.16.0.md\`: its title, then its body, here without the" \
  "end of the step's output that follows):" '~~~' "$(sed '/^End of its output:/,$d' "$issue" 2> /dev/null)" '~~~' \
  "Afterwards the index still serves $(served torch-dlpack-bridge torch_dlpack_bridge); the clone's tags are still" \
  "$(git -C "$src" tag | paste -sd' ' -)." ""

step "release-failed: a release.yml step failing on $tag, twice; its report job"
for attempt in 1 2; do
  if env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL "$src/scripts/release_check.sh" "$work/dist-${tag:-none}" \
       --tag v0.0.0 > "$work/release-failed-$attempt.log" 2>&1; then
    echo "release_check.sh passed on the wrong tag" >> "$work/release-failed-$attempt.log"
  else
    TDB_FORGE_DIR=$forge RUN_URL="(rehearsal: release-failed $attempt)" "$src/scripts/file_issues.sh" \
      --release-failed "${tag:-none}" >> "$work/release-failed-$attempt.log" 2>&1
  fi
done
release_issue=$(grep -l "^release: ${tag:-none} failed" "$forge"/issues/*.md 2> /dev/null)
ok=$([ "$(echo "$release_issue" | grep -c .)" = 1 ] && grep -q "^filed: release: " "$work/release-failed-1.log" &&
     grep -q "^already open: release: " "$work/release-failed-2.log" && echo pass || echo FAIL)
record "### release-failed: $ok" "" "\`release_check.sh --tag v0.0.0\` on $tag's wheel fails, twice; the report job" \
  "each time:" '```' "$(tail -n 2 "$work/release-failed-1.log")" "$(tail -n 1 "$work/release-failed-2.log")" '```' \
  '~~~' "$(cat "$release_issue" 2> /dev/null)" '~~~' "" \
  "The tracker at the end (the issues the report jobs filed, once each): $(ls "$forge/issues" | wc -l):" '```' \
  "$(for f in "$forge"/issues/*.md; do head -n 1 "$f"; done)" '```' ""

kill "$server_pid" && wait "$server_pid" 2> /dev/null
server_pid=
status=0
grep -q '^### .*: FAIL' "$results" && status=1
python3 - "$out" "$results" "$commit" "$((SECONDS - started))" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' || status=1
import datetime, sys
out, results, commit, seconds, load = sys.argv[1:]
marker = "## Torch watch rehearsal"
try:
    text = open(out).read()
except FileNotFoundError:
    text = ""
head = text.split(marker, 1)[0].rstrip("\n")
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
section = f"""{marker}

`scripts/torch_watch_rehearsal.sh` on {when} (commit {commit}), {int(seconds) // 60} min in all (load average at the
end: {load}): `scripts/torch_watch.py`, as `.github/workflows/torch-watch.yml` runs it, against a local index
(pypiserver on 127.0.0.1; publishing is a copy onto it), in a clone of the commit; the release's tags are made in
the clone; a folder stands in for GitHub's issues and pull requests, a bare repository for its pushes. See the
script's header for the cases.

{open(results).read()}"""
open(out, "w").write((head + "\n\n" if head else "") + section)
PY
echo "torch watch rehearsal: $( [ $status = 0 ] && echo passed || echo FAILED ) in $((SECONDS - started)) s; see $out"
exit $status
