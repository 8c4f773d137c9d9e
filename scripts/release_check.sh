#!/usr/bin/env bash
# Checks a folder of release artifacts (scripts/release_artifacts.sh) before anything is uploaded; the release
# workflow (.github/workflows/release.yml) and scripts/release_rehearsal.sh run it, .ci/run on the wheel it builds.
#   - one version: every artifact's is torch_dlpack_bridge's PACKAGE_VERSION (and the tag's, with --tag vX.Y.Z)
#   - `twine check --strict`: the metadata and the long description render as PyPI will render them
#   - the classifiers are all known to PyPI (trove-classifiers: an upload with an unknown one is refused)
#   - check-wheel-contents: no stray or duplicate files, the package where it belongs; W003 (a non-module at the
#     top: torch_dlpack_bridge_autoload.start) and W009 (several top-level entries) are the autoload hook, which
#     sits at the top of site-packages by design (setup.py)
#   - auditwheel: each wheel's platform tag is the manylinux policy auditwheel finds for it
#   - the sdist holds the table's sources, the headers, the hook, README, CHANGELOG, LICENSE and the tests
# Tools from the registry into a venv in a temporary folder, removed at the end.
#
# Usage: scripts/release_check.sh DIR [--tag vX.Y.Z]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: scripts/release_check.sh DIR [--tag vX.Y.Z]}
tag=
[ "${2:-}" != --tag ] || tag=${3:?--tag needs the tag}
tools=$(mktemp -d /tmp/tdb-release-check.XXXXXX)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install -q twine check-wheel-contents auditwheel trove-classifiers
tool=$tools/venv/bin
shopt -s nullglob
wheels=("$dir"/torch_dlpack_bridge-*.whl)
sdists=("$dir"/torch_dlpack_bridge-*.tar.gz)
[ ${#wheels[@]} -gt 0 ] || { echo "no wheel in $dir" >&2; exit 1; }

version=$(sed -n 's/^PACKAGE_VERSION = "\([^"]*\)".*/\1/p' "$repo/torch_dlpack_bridge/_build.py")
[ -z "$tag" ] || [ "$tag" = "v$version" ] || { echo "tag $tag is not v$version (_build.PACKAGE_VERSION)" >&2; exit 1; }
for artifact in "${wheels[@]}" "${sdists[@]}"; do
  case "$(basename "$artifact")" in
    torch_dlpack_bridge-"$version"-*.whl|torch_dlpack_bridge-"$version".tar.gz) ;;
    *) echo "$(basename "$artifact") is not version $version" >&2; exit 1 ;;
  esac
done

"$tool/twine" check --strict "${wheels[@]}" "${sdists[@]}"
"$tool/python" - "${wheels[@]}" <<'PY'
import sys, zipfile
from email.parser import Parser
from trove_classifiers import classifiers as known
for wheel in sys.argv[1:]:
    with zipfile.ZipFile(wheel) as z:
        meta = Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
    unknown = set(meta.get_all("Classifier") or []) - set(known)
    if unknown:
        sys.exit(f"{wheel}: classifiers PyPI does not know: {sorted(unknown)}")
print("classifiers: all known to PyPI")
PY
"$tool/check-wheel-contents" --ignore W003,W009 "${wheels[@]}"
for wheel in "${wheels[@]}"; do
  name=$(basename "$wheel" .whl)
  report=$("$tool/python" -m auditwheel show "$wheel" 2>&1)
  policy=$(echo "$report" | tr '\n' ' ' | grep -oE 'manylinux_[0-9]+_[0-9]+_(x86_64|aarch64)' | head -n 1)
  [ "${name##*-}" = "$policy" ] || { echo "$report"; echo "$name: tagged ${name##*-}, auditwheel finds $policy" >&2; exit 1; }
  echo "auditwheel: $name is $policy"
done
for sdist in "${sdists[@]}"; do
  listing=$(tar -tzf "$sdist" | sed 's|^[^/]*/||')
  for needed in PKG-INFO README.md CHANGELOG.md LICENSE setup.py pyproject.toml csrc/library.cpp \
                torch_dlpack_bridge/include/torch_dlpack_bridge/consumer.h autoload/torch_dlpack_bridge_autoload.pth \
                tests/conftest.py; do
    echo "$listing" | grep -qx "$needed" || { echo "$(basename "$sdist") lacks $needed" >&2; exit 1; }
  done
  echo "sdist: $(basename "$sdist") holds $(echo "$listing" | grep -vc '/$') files"
done
echo "release check: ${#wheels[@]} wheel(s), ${#sdists[@]} sdist(s) of version $version: all passed"
