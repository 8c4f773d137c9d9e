#!/usr/bin/env bash
# A release rehearsed end to end against a real package index, on this machine. Opt-in: not in the README's test
# command nor in .ci/run (an hour or more and tens of GB of downloads the first time; torch wheels are cached).
# Every step .github/workflows/release.yml runs is a script this runs too; only the runners and PyPI differ:
# Each step runs from a clone of the checkout's HEAD, as a release builds its tag's commit (uncommitted changes
# stay out); only the table below is written into the checkout.
#   0. lint      scripts/lint_workflows.sh: check-jsonschema and zizmor on every workflow
#   1. build     scripts/release_artifacts.sh for x86_64 and aarch64 (cross-built here): the two cp39-abi3 wheels,
#                the cp313t wheel, the sdist
#   2. check     scripts/release_check.sh: twine check --strict, classifiers, check-wheel-contents, auditwheel, sdist
#   3. wheels    scripts/release_matrix.sh: the workflow's wheel-matrix rows, read from the registry; then
#                scripts/wheel_matrix.sh on the built x86_64 wheel, one row (the workflow runs those, natively)
#   4. docs      scripts/build_docs.sh: the site built and checked from the x86_64 wheel
#   5. upload    pypiserver (from the registry) on 127.0.0.1, uploads allowed to one user of an htpasswd file made
#                here; `twine upload` of every artifact
#   6. install   per row a fresh environment with the registry's torch, then `pip install torch_dlpack_bridge` by
#                name with --index-url at that server and --extra-index-url at the registry; pip's --report says
#                which file it chose; then the main job (`python -m torch_dlpack_bridge`)
# Rows: CPython 3.9 + torch 2.4.1, 3.12 + 2.13.0, 3.13 + 2.15.0, 3.13t + 2.12.0 (the cp313t wheel), aarch64 3.11 +
# 2.13.0 under emulation (scripts/aarch64_env.sh; torch and the package in one `pip install` there, as its
# --target install cannot see a torch installed before), and `sdist`: CPython 3.9 + torch 2.4.1 on a Linux that
# accepts no manylinux wheel (PEP 600: `_manylinux.manylinux_compatible()` returns False, set after torch is in),
# so no wheel on the index serves it and pip builds the sdist; the table is then built at the first import.
# Wheel rows run the main job with building forbidden (TORCH_DLPACK_BRIDGE_BUILD=0, CXX=/nonexistent: a compile
# attempt is an ImportError) and require the library shipped in the wheel and the wheel's version.
#
# Usage: scripts/release_rehearsal.sh [--dist DIR] [ROW ...]
#   --dist DIR  use the artifacts scripts/release_artifacts.sh already built into DIR (both architectures)
#               instead of building them (step 1); they are checked, uploaded and installed as built ones.
#               They must be of HEAD's sources (the tests of step 3 are HEAD's): the run compares the sdist's
#               csrc/ and package with the clone's and says so in its table when they differ
#   ROW         py3.9-torch2.4.1 py3.12-torch2.13.0 py3.13-torch2.15.0 py3.13t-torch2.12.0 aarch64-torch2.13.0
#               sdist (default: all)
# Env: TDB_REHEARSAL_OUT (default scripts/release_rehearsal.md: the table of rows, rewritten each run)
#      TDB_REHEARSAL_REV (default HEAD: the commit rehearsed, e.g. the one --dist's artifacts were built from)
#      TDB_REHEARSAL_INDEX (the registry for torch, default https://pypi.org/simple)
# Needs: root and Debian 12 (scripts/aarch64_env.sh, scripts/freethreaded_env.sh), CPython 3.9, 3.11, 3.12 and
# 3.13 (pyenv's or on PATH), a C++ compiler, about 15 GB free for the environment of a row (each removed after it).
# The server is stopped and the work folder (environments, caches, artifacts built here) removed on any exit. A
# failed run prints the issue release.yml's report job would open (scripts/file_issues.sh --release-failed).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dist=
if [ "${1:-}" = --dist ]; then dist=$(cd "${2:?--dist needs a folder}" && pwd); shift 2; fi
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(py3.9-torch2.4.1 py3.12-torch2.13.0 py3.13-torch2.15.0 py3.13t-torch2.12.0
                               aarch64-torch2.13.0 sdist)
out=${TDB_REHEARSAL_OUT:-$repo/scripts/release_rehearsal.md}  # in the checkout, not in the clone
registry=${TDB_REHEARSAL_INDEX:-https://pypi.org/simple}
work=$(mktemp -d /tmp/tdb-rehearsal.XXXXXX)
server_pid=
cleanup() {
  [ -z "$server_pid" ] || { kill "$server_pid" 2> /dev/null; wait "$server_pid" 2> /dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
issue() {  # as release.yml's report job on a failed run: the issue, filed into a folder standing in for the tracker
  TDB_FORGE_DIR=$work/forge RUN_URL="(the rehearsal's run)" "$repo/scripts/file_issues.sh" --release-failed \
    "v${version:-unknown}" && cat "$work"/forge/issues/*.md
}
die() { echo "release rehearsal: $*" >&2; issue; exit 1; }
step() { echo "== $(date -u +%H:%M:%S) $*"; }
started=$SECONDS
failed=()  # the steps 3-4 that failed: the rows still run, the rehearsal fails at the end
git clone -q "$repo" "$work/src" && git -C "$work/src" checkout -q "${TDB_REHEARSAL_REV:-HEAD}" ||
  die "cloning $repo at ${TDB_REHEARSAL_REV:-HEAD} failed"
commit=$(git -C "$work/src" rev-parse --short HEAD)
repo=$work/src  # the scripts below are the clone's

step "0. lint: scripts/lint_workflows.sh"
"$repo/scripts/lint_workflows.sh" || die "the workflows' lint failed"

if [ -z "$dist" ]; then
  dist=$work/dist
  step "1. build: scripts/release_artifacts.sh (x86_64, then aarch64)"
  "$repo/scripts/release_artifacts.sh" --arch x86_64 "$dist" || die "building the x86_64 artifacts failed"
  "$repo/scripts/release_artifacts.sh" --arch aarch64 "$dist" || die "building the aarch64 artifacts failed"
else
  step "1. build: skipped, the artifacts of $dist"
fi
shopt -s nullglob
artifacts=("$dist"/torch_dlpack_bridge-*.whl "$dist"/torch_dlpack_bridge-*.tar.gz)
version=$(sed -n 's/^PACKAGE_VERSION = "\([^"]*\)".*/\1/p' "$repo/torch_dlpack_bridge/_build.py")
[ -n "$version" ] || die "no PACKAGE_VERSION in torch_dlpack_bridge/_build.py"
for kind in "cp39-abi3-*_x86_64.whl" "cp39-abi3-*_aarch64.whl" "cp313-cp313t-*_x86_64.whl"; do
  found=("$dist"/torch_dlpack_bridge-"$version"-$kind)
  [ ${#found[@]} = 1 ] || die "$dist: expected one torch_dlpack_bridge-$version-$kind"
done
[ -f "$dist/torch_dlpack_bridge-$version.tar.gz" ] || die "$dist: no torch_dlpack_bridge-$version.tar.gz"

sources_note=""
if [ "$dist" != "$work/dist" ]; then  # artifacts built before: of HEAD's sources?
  mkdir "$work/sdist" && tar -xzf "$dist/torch_dlpack_bridge-$version.tar.gz" -C "$work/sdist" --strip-components=1
  diff -rq -x '*.so' -x __pycache__ "$work/sdist/csrc" "$repo/csrc" > /dev/null &&
    diff -rq -x '*.so' -x __pycache__ -x '*.egg-info' -x _lib "$work/sdist/torch_dlpack_bridge" "$repo/torch_dlpack_bridge" \
      > /dev/null || sources_note="the artifacts of --dist are not of HEAD's sources (csrc/ or the package differ)"
  [ -z "$sources_note" ] || echo "release rehearsal: $sources_note" >&2
fi

step "2. check: scripts/release_check.sh"
"$repo/scripts/release_check.sh" "$dist" --tag "v$version" || die "the artifacts' check failed"

step "3. wheel checks: release.yml's rows (scripts/release_matrix.sh), then scripts/wheel_matrix.sh 2.13.0:3.11"
PIP_INDEX_URL=$registry "$repo/scripts/release_matrix.sh" > "$work/release_matrix.json" ||
  failed+=("scripts/release_matrix.sh")
release_rows=$(python3 -c 'import json, sys; print(", ".join(j["rows"] for j in json.load(open(sys.argv[1]))))' \
               "$work/release_matrix.json" 2> /dev/null)
TDB_WHEEL_DIR=$dist TDB_MATRIX_DIR=$work/matrix TDB_MATRIX_OUT=$work/wheel_matrix.md \
  "$repo/scripts/wheel_matrix.sh" 2.13.0:3.11 > "$work/wheel_matrix.log" 2>&1 ||
  { tail -n 30 "$work/wheel_matrix.log"; failed+=("scripts/wheel_matrix.sh"); }
matrix_row=$(grep -E '^\| x86_64 \| 2\.13\.0 \| 3\.11 ' "$work/wheel_matrix.md" |
             awk -F' *[|] *' '{print "main job " $6 ", smoke tests " $7}')

step "4. docs: scripts/build_docs.sh"
"$repo/scripts/build_docs.sh" --wheel-from "$dist" "$work/site" > "$work/docs.log" 2>&1 ||
  { tail -n 30 "$work/docs.log"; failed+=("scripts/build_docs.sh"); }
docs_line=$(grep -E '^docs:' "$work/docs.log" | tail -n 1 | sed 's/ into .*//')

step "5. upload: pypiserver on 127.0.0.1, twine upload"
python3 -m venv "$work/server"
"$work/server/bin/pip" install -q pypiserver passlib twine || die "installing pypiserver and twine failed"
password=$("$work/server/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
"$work/server/bin/python" - "$work/htpasswd" "$password" <<'PY'
import sys
from passlib.apache import HtpasswdFile
users = HtpasswdFile(sys.argv[1], new=True)
users.set_password("rehearsal", sys.argv[2])
users.save()
PY
port=$("$work/server/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir "$work/packages"
"$work/server/bin/pypi-server" run -i 127.0.0.1 -p "$port" -P "$work/htpasswd" -a update "$work/packages" \
  > "$work/server.log" 2>&1 &
server_pid=$!
index=http://127.0.0.1:$port
for _ in $(seq 600); do  # until it answers (or has died)
  curl -sf "$index/simple/" > /dev/null && break
  kill -0 "$server_pid" 2> /dev/null || { cat "$work/server.log"; die "pypiserver did not start"; }
  sleep 0.1
done
curl -sf "$index/simple/" > /dev/null || die "pypiserver did not answer on $index"
# An upload without the password must be refused: uploads are not open to anyone on this machine.
"$work/server/bin/twine" upload --non-interactive --disable-progress-bar --repository-url "$index/" -u rehearsal -p wrong \
  "${artifacts[0]}" > /dev/null 2>&1 && die "pypiserver accepted an upload with a wrong password"
TWINE_PASSWORD=$password "$work/server/bin/twine" upload --non-interactive --disable-progress-bar --repository-url "$index/" \
  -u rehearsal "${artifacts[@]}" || die "twine upload failed"
served=$(curl -sf "$index/simple/torch-dlpack-bridge/" | grep -oE 'torch_dlpack_bridge-[^"#<]+' | sort -u)
echo "$index serves:" $served
[ "$(echo "$served" | wc -l)" = ${#artifacts[@]} ] || die "the index does not serve every artifact uploaded"

step "6. install by name and run the main job"
python_for() {  # python_for 3.9 -> a CPython of that version (pyenv's or on PATH)
  local found
  found=$(ls /root/.pyenv/versions/"$1".*/bin/python"$1" 2> /dev/null | head -n 1)
  echo "${found:-$(command -v "python$1")}"
}
chosen() {  # chosen REPORT -> "file pip chose for torch_dlpack_bridge<TAB>its index" from pip's --report
  python3 - "$1" <<'PY'
import json, os, sys, urllib.parse
for item in json.load(open(sys.argv[1]))["install"]:
    if item["metadata"]["name"].lower().replace("-", "_") == "torch_dlpack_bridge":
        url = urllib.parse.urlsplit(item["download_info"]["url"])
        print(f"{os.path.basename(url.path)}\t{url.scheme}://{url.netloc}")
PY
}
results=$work/rows.tsv && : > "$results"
status=0
for row in "${rows[@]}"; do
  run=() env_note="" forbid=(TORCH_DLPACK_BRIDGE_BUILD=0 CXX=/nonexistent) compiled="nothing" warn=()
  case "$row" in
    py3.9-torch2.4.1) py=3.9 torch=2.4.1 ;;
    py3.12-torch2.13.0) py=3.12 torch=2.13.0 ;;
    py3.13-torch2.15.0) py=3.13 torch=2.15.0 ;;
    py3.13t-torch2.12.0) py=3.13t torch=2.12.0 ;;
    aarch64-torch2.13.0) py=3.11 torch=2.13.0 ;;
    sdist) py=3.9 torch=2.4.1 ;;
    *) die "unknown row $row" ;;
  esac
  venv=$work/rows/$row log=$work/$row.log report=$work/$row.json
  cache=$work/cache-$row
  step "   $row"
  fail() { status=1; printf '%s\t%s\t%s\t\t\tFAIL: %s\t\n' "$row" "$py" "$torch" "$1" >> "$results"; tail -n 20 "$log"; }
  t0=$SECONDS
  if [ "$row" = aarch64-torch2.13.0 ]; then
    aenv=$("$repo/scripts/aarch64_env.sh" 2>> "$log") || { fail "scripts/aarch64_env.sh failed"; continue; }
    run=("$aenv/bin/aarch64-run")
    env_note="emulated (qemu-user), CPython 3.11 arm64; "
    "$repo/scripts/aarch64_env.sh" venv "$venv" >> "$log" 2>&1 &&
      "$repo/scripts/aarch64_env.sh" pip-install "$venv" --report "$report" --index-url "$index/simple/" \
        --extra-index-url "$registry" "torch==$torch" torch_dlpack_bridge >> "$log" 2>&1 ||
      { fail "pip install torch==$torch torch_dlpack_bridge failed"; continue; }
    t_install=$((SECONDS - t0))
  else
    if [ "$py" = 3.13t ]; then
      ft=$("$repo/scripts/freethreaded_env.sh" --python 3.13 2>> "$log") || { fail "scripts/freethreaded_env.sh failed"; continue; }
      python=$(dirname "$(dirname "$(dirname "$ft")")")/cpython-3.13t/bin/python3.13t  # its interpreter
      env_note="free-threaded, GIL off after the main job; "
      warn=(-W error::RuntimeWarning)  # a module that turns the GIL back on warns: the main job fails
    else
      python=$(python_for "$py")
    fi
    [ -n "$python" ] && [ -x "$python" ] || { fail "no CPython $py here"; continue; }
    "$python" -m venv "$venv" >> "$log" 2>&1 &&
      "$venv/bin/python" -m pip install -q "torch==$torch" >> "$log" 2>&1 || { fail "installing torch $torch failed"; continue; }
    t_torch=$((SECONDS - t0))
    if [ "$row" = sdist ]; then
      site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      printf 'def manylinux_compatible(major, minor, arch):\n    return False  # a libc no manylinux wheel fits\n' \
        > "$site/_manylinux.py"
      env_note="no manylinux wheel accepted (PEP 600 _manylinux), "
    fi
    t1=$SECONDS
    "$venv/bin/python" -m pip install --report "$report" --index-url "$index/simple/" --extra-index-url "$registry" \
      torch_dlpack_bridge >> "$log" 2>&1 || { fail "pip install torch_dlpack_bridge failed"; continue; }
    t_install=$((SECONDS - t1))
    env_note="${env_note}torch installed first in ${t_torch} s; "
  fi
  IFS=$'\t' read -r file from <<< "$(chosen "$report")"
  [ "$from" = "$index" ] || { fail "pip chose ${file:-nothing} from ${from:-?}, not from the rehearsal's index"; continue; }
  vpython=$venv/bin/python
  export TORCH_DLPACK_BRIDGE_CACHE=$cache
  first_s=
  if [ "$row" = sdist ]; then
    case "$file" in *.tar.gz) ;; *) fail "pip chose $file, not the sdist"; continue ;; esac
    compiled="at install: the probe (pip built a wheel from the sdist, install ${t_install} s)"
    t2=$SECONDS
    first=$(cd "$work" && "$vpython" -c 'import sys, torch; print("published", "torch_dlpack_bridge" in sys.modules)' 2>&1)
    echo "$first" >> "$log"
    first_s=$((SECONDS - t2))
    echo "$first" | grep -q "building the exchange table" && echo "$first" | grep -q "^published True" ||
      { fail "the first import did not build and publish the table"; continue; }
    compiled="$compiled; at the first \`import torch\`: the table (\"$(echo "$first" | grep -m 1 -o 'building the exchange table[^(]*' | sed 's/[, ]*$//')\", ${first_s} s)"
  fi
  t3=$SECONDS
  main_out=$(cd "$work" && env "${forbid[@]}" "${run[@]}" "$vpython" ${warn[@]+"${warn[@]}"} -m torch_dlpack_bridge 2>&1)
  main_rc=$?
  main_s=$((SECONDS - t3))
  echo "$main_out" >> "$log"
  # torch 2.4.1+cu121; torch_dlpack_bridge 0.1.0, table library installed with the package, built against ...
  status_line=$(echo "$main_out" | grep -m 1 '^torch .*; torch_dlpack_bridge ')
  installed_torch=$(echo "$status_line" | sed -n 's/^torch \([^;]*\);.*/\1/p')
  main_version=$(echo "$status_line" | sed -n 's/.*; torch_dlpack_bridge \([^,]*\),.*/\1/p')
  origin=$(echo "$status_line" | sed -n 's/.*, table library \(.*\), built against.*/\1/p')
  want_origin="installed with the package"
  [ "$row" = sdist ] && want_origin="built at an earlier import"
  if [ $main_rc != 0 ]; then main="FAIL (exit $main_rc)"
  elif [ "$main_version" != "$version" ]; then main="FAIL: prints version $main_version, the wheel is $version"
  elif [ "$origin" != "$want_origin" ]; then main="FAIL: table library $origin"
  else main="pass: $version, table library $origin"
  fi
  if [ "$py" = 3.13t ] && [ $main_rc = 0 ]; then
    gil=$(cd "$work" && env "${forbid[@]}" "$vpython" -c 'import sys, torch, torch_dlpack_bridge; print(sys._is_gil_enabled())')
    [ "$gil" = False ] || main="FAIL: the GIL is on after import ($gil)"
  fi
  case "$main" in pass*) ;; *) status=1 ;; esac
  [ "$row" = sdist ] || compiled="nothing (main job with building forbidden)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$py" "${installed_torch:-$torch}" "$file" "$compiled" "$main" \
    "${env_note}pip install ${t_install} s, main job ${main_s} s" >> "$results"
  unset TORCH_DLPACK_BRIDGE_CACHE
  rm -rf "$venv" "$cache"  # several GB each
done

step "7. stop the server"
kill "$server_pid" && wait "$server_pid" 2> /dev/null
server_pid=
load=$(cut -d' ' -f1-3 /proc/loadavg)
artifact_list=$(for a in "${artifacts[@]}"; do echo "\`$(basename "$a")\` ($(du -k "$a" | cut -f1) KiB)"; done |
                paste -sd, - | sed 's/,/, /g')
[ ${#failed[@]} = 0 ] || status=1
python3 - "$out" "$results" "$artifact_list" "$matrix_row" "$docs_line" "$((SECONDS - started))" "$load" \
  "$commit" "${failed[*]}" "$sources_note" "$release_rows" <<'PY' || status=1
import datetime, sys
out, results, artifacts, matrix_row, docs_line, seconds, load, commit, failed, sources_note, rows = sys.argv[1:]
columns = ["row", "Python", "torch", "file pip chose", "compiled", "main job", "notes and time"]
rows = [line.rstrip("\n").split("\t") for line in open(results)]
today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
try:  # scripts/torch_watch_rehearsal.sh's section, after the table, stays
    text = open(out).read()
    kept = text[text.find("\n## Torch watch rehearsal"):] if "\n## Torch watch rehearsal" in text else ""
except FileNotFoundError:
    kept = ""
with open(out, "w") as f:
    f.write(f"""# Release rehearsal

`scripts/release_rehearsal.sh` on {today} (commit {commit}), {int(seconds) // 60} min in all (load average at the
end: {load}):
the release's artifacts built by `scripts/release_artifacts.sh` ({artifacts}), checked by
`scripts/release_check.sh` (`twine check --strict`, classifiers, `check-wheel-contents`, `auditwheel`, the sdist's
files: passed), release.yml's wheel-matrix rows read from the registry by `scripts/release_matrix.sh` ({rows}),
the x86_64 wheel through `scripts/wheel_matrix.sh 2.13.0:3.11` ({matrix_row.strip()}), the docs
site built and checked from it by `scripts/build_docs.sh` ({docs_line or "see its log"}); then uploaded with
`twine upload` to a pypiserver on 127.0.0.1 (uploads for one htpasswd user; a wrong password refused), and
installed by name in a fresh environment per row: the registry's torch first, then `pip install
torch_dlpack_bridge --index-url <that server> --extra-index-url <the registry>` (pip's `--report` names the file it
chose; every one came from the rehearsal's server). Main job: `python -m torch_dlpack_bridge`, building forbidden
for wheel rows (`TORCH_DLPACK_BRIDGE_BUILD=0`, `CXX=/nonexistent`), its status line's version and table library
checked. The `sdist` row is a CPython that accepts no manylinux wheel (PEP 600's `_manylinux` module, set after
torch is installed): a stand-in for what no wheel serves (free-threaded 3.14t, other platforms).
{"**FAILED: " + failed + "** (their logs were printed by the run)." if failed else ""}
{"Note: " + sources_note + "." if sources_note else ""}

| {' | '.join(columns)} |
|{'---|' * len(columns)}
""")
    for cells in rows:
        f.write("| " + " | ".join(cells + [""] * (len(columns) - len(cells))) + " |\n")
    f.write(kept)
PY
cat "$out"
[ $status = 0 ] || issue
exit $status
