#!/usr/bin/env bash
# Linux aarch64 on this x86_64 machine: Debian's cross compiler for the release build (scripts/build_wheels.sh
# --arch aarch64) and an emulated aarch64 CPython 3.11 for the matrix (scripts/wheel_matrix.sh aarch64 rows).
# Made once into a cache folder outside the checkout; later calls only print where it is. Needs root (apt,
# and the user + mount namespace the emulated programs run in) and Debian 12 (bookworm) with its mirrors.
# qemu-user comes from Debian 13 (trixie, Debian's current stable: static binary, downloaded into the cache, not
# installed). Under Debian 12's 7.2 a build at import hung twice in the linker child the emulated Python forked
# (an earlier session); it has not hung since, under 7.2 (2 builds) or 10 and 11 (3), and 10 runs the matrix rows.
#
# Usage: scripts/aarch64_env.sh                  make it (toolchain, sysroot, runner) if not made; print the folder
#        scripts/aarch64_env.sh venv DIR         a fresh venv folder for the emulated python (DIR/bin/python3.11,
#                                                DIR/lib/python3.11/site-packages)
#        scripts/aarch64_env.sh pip-install DIR ARGS...   `pip install ARGS` into that venv folder, run natively
#                                                by the python3 on PATH (CPython 3.11, with pip): aarch64 CPython
#                                                3.11 wheels only, and environment markers evaluated as on aarch64
# Env:   TDB_AARCH64_CACHE (default ~/.cache/torch_dlpack_bridge-aarch64)
#
# What it makes there:
#   sysroot/       Debian 12 arm64 .debs unpacked (glibc, libstdc++, CPython 3.11 and its headers); never
#                  `apt-get install pkg:arm64`, which can replace the host's python3 and libc
#   bin/qemu-aarch64  Debian 13's static qemu-user (10.0)
#   bin/aarch64-run CMD...   runs CMD in a private user + mount namespace (every uid mapped to itself) where
#                  aarch64 programs run under qemu-user (a binfmt_misc instance of that namespace, Linux >= 6.7,
#                  so a subprocess the emulated Python starts is emulated too, and x86_64 programs it starts,
#                  such as a compiler, run natively),
#                  and /proc/cpuinfo shows a fixed arm64 CPU (Neoverse N1 features: the same machine whatever
#                  qemu would report; qemu 7.2 showed the host's x86 one, on which torch's cpuinfo crashed)
#   bin/python3.11 the emulated CPython (through aarch64-run)
#   toolchain/bin/{c++,g++,cc,gcc}  what the emulated machine's native compiler would be: the cross compiler,
#                  with the sysroot's Python headers first (put it first on PATH to let a build at import find it)
set -euo pipefail
cache=${TDB_AARCH64_CACHE:-$HOME/.cache/torch_dlpack_bridge-aarch64}
sysroot=$cache/sysroot

pip_install() {
  local dir=$1 m flags=()
  shift
  # The registry's aarch64 torch and its nvidia-* dependencies carry several manylinux tags: list them all.
  for m in $(seq 17 28); do flags+=(--platform "manylinux_2_${m}_aarch64"); done
  flags+=(--platform manylinux2014_aarch64 --platform linux_aarch64 --only-binary=:all: --python-version 3.11
          --implementation cp --abi cp311 --abi abi3 --abi none)
  # pip's --platform picks wheels but leaves environment markers to the running machine: torch's
  # `platform_machine == "x86_64"` CUDA packages would come along (for torch 2.4 they have no aarch64 wheel, so
  # the install fails). pip reads the machine from platform.machine() when it evaluates a marker.
  python3 -c '
import platform, runpy, sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"scripts/aarch64_env.sh pip-install: needs CPython 3.11 as python3 (markers), not {platform.python_version()}")
platform.machine = lambda: "aarch64"
runpy.run_module("pip", run_name="__main__", alter_sys=True)' install --target "$dir/lib/python3.11/site-packages" \
    "${flags[@]}" "$@"
}

make_venv() {
  # A venv of the emulated python by hand (its own venv module would link to /usr/bin/python3.11, which is the
  # host's x86_64 python outside qemu): a copy of the interpreter and pyvenv.cfg, so sys.executable is an
  # aarch64 program the tests can start again.
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib/python3.11/site-packages"
  cp "$sysroot/usr/bin/python3.11" "$dir/bin/python3.11"
  ln -s python3.11 "$dir/bin/python3" && ln -s python3.11 "$dir/bin/python"
  printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\n' > "$dir/pyvenv.cfg"
}

case "${1:-make}" in
  pip-install) shift; pip_install "$@"; exit ;;
  venv) [ -x "$cache/bin/aarch64-run" ] || "$0" > /dev/null; make_venv "$2"; exit 0 ;;
  make) ;;
  *) sed -n '2,/^set /{/^set /!p}' "$0" >&2; exit 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
if ! command -v aarch64-linux-gnu-g++ > /dev/null; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu \
    binutils-aarch64-linux-gnu > /dev/null
fi
mkdir -p "$cache/bin" "$cache/toolchain/bin" "$cache/binfmt"
if [ ! -x "$cache/bin/qemu-aarch64" ]; then
  # apt with a private source list and state (trixie's lists never reach the host's apt), download only.
  apt=$cache/apt && rm -rf "$apt" && mkdir -p "$apt/lists/partial" "$apt/cache" "$apt/deb" "$apt/sources"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    /usr/share/keyrings/debian-archive-keyring.gpg > "$apt/sources/trixie.sources"
  aptopts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt/sources" -o Dir::State::Lists="$apt/lists"
           -o Dir::Cache="$apt/cache" -o APT::Sandbox::User=root)
  apt-get -qq "${aptopts[@]}" update && (cd "$apt/deb" && apt-get -qq "${aptopts[@]}" download qemu-user/trixie)
  dpkg -x "$apt"/deb/qemu-user_*.deb "$apt/unpacked"
  mv "$apt/unpacked/usr/bin/qemu-aarch64" "$cache/bin/qemu-aarch64.tmp" && mv "$cache/bin/qemu-aarch64.tmp" "$cache/bin/qemu-aarch64"
  rm -rf "$apt"
fi
if [ ! -f "$cache/.complete" ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64 && apt-get update -qq; }
  rm -rf "$cache/debs" "$sysroot" && mkdir -p "$cache/debs" "$sysroot"
  (cd "$cache/debs" && apt-get download -q -o APT::Sandbox::User=root $(for p in libc6 libgcc-s1 libstdc++6 libgomp1 \
    libffi8 zlib1g libexpat1 libssl3 libbz2-1.0 liblzma5 libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8 \
    libcrypt1 libdb5.3 libgdbm6 libnsl2 libtirpc3 libzstd1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 \
    libcom-err2 libkeyutils1 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3.11 \
    libpython3.11-dev python3.11-dev; do echo "$p:arm64"; done) media-types > /dev/null)
  for deb in "$cache"/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
  rm -rf "$cache/debs"
  for i in $(seq 0 $(($(nproc) - 1))); do
    printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' "$i"
  done > "$cache/cpuinfo"
fi

# The small scripts are written each time (each replaced whole, so a running one is not disturbed).
put() { cat > "$1.tmp.$$" && chmod +x "$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"; }
# binfmt_misc rule: aarch64 ELF executables (e_machine 183) go to qemu-aarch64, opened now (F flag).
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
printf '%s' ":tdb-aarch64:M::$magic:$mask:$cache/bin/qemu-aarch64:F" | put "$cache/binfmt-rule"
put "$cache/bin/aarch64-run" <<'EOF'
#!/bin/sh
# Runs "$@" where aarch64 programs run under qemu-user with ../sysroot (scripts/aarch64_env.sh made this).
# A mount namespace of this user (root) where /proc/cpuinfo shows an arm64 CPU; inside it a user namespace that
# maps every uid and gid to itself (ownership and chown work as outside) and owns a binfmt_misc instance
# sending aarch64 programs to qemu-user. Nothing changes outside.
here=$(cd "$(dirname "$0")/.." && pwd)
export QEMU_LD_PREFIX="$here/sysroot"
exec unshare --mount sh -c '
  here=$0
  mount --bind "$here/cpuinfo" /proc/cpuinfo
  exec 3<&0  # an asynchronous command gets /dev/null as stdin unless told
  fifo=$(mktemp -u /tmp/tdb-aarch64-run.XXXXXX) && mkfifo -m 600 "$fifo"
  unshare --user --mount sh -c "
    read go < \"\$0\" && rm -f \"\$0\" &&
    mount -t binfmt_misc binfmt_misc \"\$1/binfmt\" && cat \"\$1/binfmt-rule\" > \"\$1/binfmt/register\" &&
    shift && exec \"\$@\"" "$fifo" "$here" "$@" 0<&3 3<&- &
  pid=$!
  # The identity maps are written from outside, once the child is in its user namespace.
  outer=$(readlink /proc/self/ns/user)
  while kill -0 $pid 2> /dev/null && [ "$(readlink /proc/$pid/ns/user)" = "$outer" ]; do sleep 0.01; done
  echo "0 0 4294967295" > /proc/$pid/uid_map && echo "0 0 4294967295" > /proc/$pid/gid_map && echo go > "$fifo"
  wait $pid' "$here" "$@"
EOF
put "$cache/bin/python3.11" <<EOF
#!/bin/sh
exec $cache/bin/aarch64-run $sysroot/usr/bin/python3.11 "\$@"
EOF
for tool in c++:g++ g++:g++ cc:gcc gcc:gcc; do
  put "$cache/toolchain/bin/${tool%%:*}" <<EOF
#!/bin/sh
# The emulated aarch64 machine's native compiler: the cross compiler, with the target's Python headers ahead
# of any the command names (gcc ignores an -I that repeats an -isystem dir, so a command that already names
# them with -I, as setuptools does, is left alone).
case " \$* " in *" -I$sysroot/usr/include/python3.11 "*) exec aarch64-linux-gnu-${tool##*:} "\$@" ;; esac
exec aarch64-linux-gnu-${tool##*:} -isystem $sysroot/usr/include/python3.11 -isystem $sysroot/usr/include "\$@"
EOF
done
if [ ! -f "$cache/.complete" ]; then
  "$cache/bin/python3.11" -c 'import platform, sys; assert platform.machine() == "aarch64", platform.machine(); print("emulated", sys.version.split()[0], platform.machine())' >&2
  touch "$cache/.complete"
  echo "made in $((SECONDS - start)) s" >&2
fi
echo "$cache"
