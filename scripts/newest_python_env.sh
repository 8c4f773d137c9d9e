#!/usr/bin/env bash
# The newest CPython (3.14 and 3.15, from Debian testing) on this Debian 12 x86_64 machine, for the wheel
# matrix (scripts/wheel_matrix.sh rows with Python 3.14 or 3.15): a Debian testing ("forky") chroot made once
# with debootstrap into a cache folder outside the checkout. Needs root. Later calls only print the folder.
#
# Usage: scripts/newest_python_env.sh      make it if not made; print the folder
#        FOLDER/bin/chroot-run CMD...      runs CMD in the chroot (in a private mount namespace: /proc, /sys, /dev,
#                                          /tmp and /work are the host's, so paths under them are the same inside)
# Env:   TDB_NEWEST_PYTHON_CACHE (default ~/.cache/torch_dlpack_bridge-newest-python)
#
# Two pitfalls it handles: bookworm's debootstrap has no script for "forky" (the sid one works), and inside,
# `apt-get update` refuses testing's Release file as expired (Check-Valid-Until off).
set -euo pipefail
cache=${TDB_NEWEST_PYTHON_CACHE:-$HOME/.cache/torch_dlpack_bridge-newest-python}
root=$cache/root
# The Pythons with their headers, and a C/C++ compiler, as the x86_64 host rows have (tests build at import
# in subprocesses and compile fixtures; the matrix still forbids the installed package to build at import).
packages=(python3.14 python3.14-venv python3.14-dev python3.15 python3.15-venv python3.15-dev gcc g++)

write_runner() {
  mkdir -p "$cache/bin"
  cat > "$cache/bin/chroot-run.tmp.$$" <<'EOF'
#!/bin/sh
# Runs "$@" in the Debian testing chroot ../root (scripts/newest_python_env.sh made this). The mounts live in a
# private mount namespace and go with it. The host's pip settings pass, except its local find-links folder.
here=$(cd "$(dirname "$0")/.." && pwd)
unset PIP_FIND_LINKS
exec unshare --mount sh -c '
  set -e
  r=$0/root
  for d in /proc /sys /dev /tmp /work; do [ -d "$d" ] || continue; mkdir -p "$r$d"; mount --rbind "$d" "$r$d"; done
  exec chroot "$r" env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"' "$here" "$@"
EOF
  chmod +x "$cache/bin/chroot-run.tmp.$$" && mv -f "$cache/bin/chroot-run.tmp.$$" "$cache/bin/chroot-run"
}

install_packages() {
  "$cache/bin/chroot-run" dpkg -s "${packages[@]}" > /dev/null 2>&1 ||
    "$cache/bin/chroot-run" sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages[*]} > /dev/null"
}

if [ -f "$cache/.complete" ]; then write_runner; install_packages; echo "$cache"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
command -v debootstrap > /dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap > /dev/null; }
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
rm -rf "$root" && mkdir -p "$root"
# debootstrap mounts /proc and /sys in the target; in a private mount namespace they cannot outlive it.
unshare --mount debootstrap --variant=minbase --include=ca-certificates forky "$root" "$mirror" \
  /usr/share/debootstrap/scripts/sid > "$cache/debootstrap.log" 2>&1 ||
  { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99tdb-no-valid-until"
cp /etc/resolv.conf "$root/etc/resolv.conf"
write_runner
install_packages
# The host's CA bundle (it may hold a local certificate authority the registry mirror needs), where the host's
# pip settings (PIP_CERT) point.
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
"$cache/bin/chroot-run" sh -c 'python3.14 --version && python3.15 --version' >&2
touch "$cache/.complete"
echo "made in $((SECONDS - start)) s" >&2
echo "$cache"
