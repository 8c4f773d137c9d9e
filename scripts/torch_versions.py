#!/usr/bin/env python3
"""Which torch versions a release covers, read from a package index: the one place it is decided.

A release holds one table library per torch minor, from 2.4 to the newest torch on the index, each built against
that minor's newest patch that has a wheel for the build's Python (CPython 3.11 for the abi3 wheel, the
interpreter's own tag for a free-threaded one: cp313t, cp314t) and architecture. scripts/build_wheels.sh reads
it; scripts/torch_watch.py (.github/workflows/torch-watch.yml) asks the same index, and torch's test channel,
what is newer than the newest release of this package covers. Standard library only; the index is a PEP 503
"simple" index (PyPI, pypiserver, download.pytorch.org/whl/test).

Usage: scripts/torch_versions.py [--index URL] [--python-abi abi3|cp313t|...] [--arch x86_64|aarch64]
       prints the versions, one line, oldest first (default: the index pip would use, abi3, this machine's arch).
       scripts/torch_versions.py [--index URL] --release-matrix
       prints release.yml's wheel-matrix jobs as JSON (scripts/release_matrix.sh hands them to the workflow).
"""

from __future__ import annotations

import argparse
import html.parser
import json
import os
import platform
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

OLDEST = (2, 4)
"""The oldest torch minor a release covers (its table relies on torch >= 2.4; pyproject's torch>=2.4)."""
PYPI = "https://pypi.org/simple"
TEST_CHANNEL = "https://download.pytorch.org/whl/test"
"""torch's release candidates, published here ahead of the release (and never on PyPI)."""

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?(?:\+[\w.]+)?")


def version_key(version: str) -> Tuple:
    """A sort key for the PEP 440 versions torch and this package use (X.Y.Z, pre-releases aN/bN/rcN, .postN,
    .devN, a +local part, which is ignored): 2.16.0.dev1 < 2.16.0a1 < 2.16.0rc1 < 2.16.0 < 2.16.0.post1."""
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    major, minor, patch, phase, number, post, dev = match.groups()
    if phase:
        pre = ("a", "b", "rc").index(phase) + 1, int(number)
    else:
        pre = (0 if dev is not None and post is None else 4), 0  # X.Y.Z.devN comes before X.Y.ZaN
    return ((int(major), int(minor), int(patch or 0)), pre, -1 if post is None else int(post),
            float("inf") if dev is None else int(dev))


def is_final(version: str) -> bool:
    """A release: no aN/bN/rcN, no .devN (a post-release and a +local part are fine)."""
    key = version_key(version)
    return key[1][0] == 4 and key[3] == float("inf")


def minor_of(version: str) -> Tuple[int, int]:
    return version_key(version)[0][:2]


def public(version: str) -> str:
    """The version without its +local part (2.16.0+cpu -> 2.16.0): what `pip download torch==V` asks for."""
    return version.split("+", 1)[0]


class Wheel(NamedTuple):
    version: str
    python: str  # "cp311"
    abi: str  # "cp311", "cp313t", "abi3"
    platform: str  # "manylinux_2_28_x86_64"


def parse_wheel(filename: str, project: str) -> Optional[Wheel]:
    """The parts of a wheel's file name (PEP 427) for `project`, or None for another file (an sdist, a
    .metadata file, another project)."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-len(".whl")].split("-")
    if len(parts) not in (5, 6) or parts[0].lower() != project.replace("-", "_").lower():
        return None
    try:
        version_key(parts[1])
    except ValueError:
        return None
    return Wheel(parts[1], parts[-3], parts[-2], parts[-1])


class _Links(html.parser.HTMLParser):
    """The files a PEP 503 project page links to, without the yanked ones (data-yanked)."""

    def __init__(self, base: str):
        super().__init__()
        self.base = base
        self.files: Dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "a" and attributes.get("href") and "data-yanked" not in attributes:
            url = urllib.parse.urljoin(self.base, attributes["href"])
            self.files[urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])] = url


def files_on_page(page: str, base: str = "") -> Dict[str, str]:
    """{file name: its URL} for the files a PEP 503 project page (at `base`) links to, yanked ones left out."""
    links = _Links(base)
    links.feed(page)
    return links.files


def listing(index: str, project: str) -> Dict[str, str]:
    """{file name: URL} of what the index offers for `project` (its PEP 503 page); empty where it has none."""
    url = f"{index.rstrip('/')}/{re.sub(r'[-_.]+', '-', project).lower()}/"  # the name as PEP 503 normalizes it
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "text/html"}), timeout=120) as r:
            return files_on_page(r.read().decode("utf-8", "replace"), url)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return {}
        raise


def build_python(python_abi: str) -> Tuple[str, str]:
    """The (python, abi) tags of the torch wheels a build uses: CPython 3.11's for the abi3 wheel (whose
    libraries serve every CPython with a GIL), the free-threaded interpreter's own otherwise."""
    if python_abi == "abi3":
        return "cp311", "cp311"
    return python_abi[:-1], python_abi


def torch_wheels(files: Iterable[str], python_abi: str = "abi3", arch: str = "x86_64") -> List[str]:
    """The torch versions with a Linux wheel a build for `python_abi` and `arch` can use."""
    python, abi = build_python(python_abi)
    found = set()
    for name in files:
        wheel = parse_wheel(name, "torch")
        if (wheel is not None and wheel.python == python and wheel.abi == abi and wheel.platform.endswith("_" + arch)
                and "linux" in wheel.platform):
            found.add(wheel.version)
    return sorted(found, key=version_key)


def linux_versions(files: Iterable[str]) -> List[str]:
    """The torch versions with a Linux wheel of any CPython and architecture: a torch is out once any has one
    (where none serves the build's CPython, the build fails and says so; it is not taken for nothing new)."""
    found = set()
    for name in files:
        wheel = parse_wheel(name, "torch")
        if wheel is not None and "linux" in wheel.platform:
            found.add(public(wheel.version))
    return sorted(found, key=version_key)


def cpythons(files: Iterable[str], version: str, arch: str) -> List[str]:
    """The CPythons ("3.9", ...) with a torch `version` wheel for Linux on `arch`, with a GIL, oldest first."""
    found = set()
    for name in files:
        wheel = parse_wheel(name, "torch")
        if (wheel is not None and public(wheel.version) == version and "linux" in wheel.platform
                and wheel.platform.endswith("_" + arch) and re.fullmatch(r"cp3\d+", wheel.abi or "")
                and wheel.python == wheel.abi):
            found.add(f"3.{wheel.python[3:]}")
    return sorted((p for p in found if p in RUNNER_PYTHONS), key=lambda p: int(p.split(".")[1]))


RUNNER_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
"""The CPythons actions/setup-python installs as releases on GitHub's runners (a newer one waits for it)."""
RUNNERS = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}


def release_matrix(files: Iterable[str]) -> List[Dict[str, str]]:
    """release.yml's wheel-matrix jobs, from what the index holds (no torch version written by hand): on
    x86_64 the oldest minor on its oldest CPython, the minor before the newest on 3.11 and the newest on its
    newest CPython, a job each; on aarch64 one job on 3.11: the minor before the newest, and the newest as the
    build at import (:uncovered). A job: arch, runner, python, rows (scripts/wheel_matrix.sh's arguments)."""
    files = list(files)
    jobs = []
    x86 = covered_versions(files, "abi3", "x86_64")
    if x86:
        picks = [(x86[0], cpythons(files, x86[0], "x86_64")[:1])]
        if len(x86) > 2:
            picks.append((x86[-2], ["3.11"] if "3.11" in cpythons(files, x86[-2], "x86_64") else []))
        if len(x86) > 1:
            picks.append((x86[-1], cpythons(files, x86[-1], "x86_64")[-1:]))
        jobs += [{"arch": "x86_64", "runner": RUNNERS["x86_64"], "python": python[0], "rows": f"{torch}:{python[0]}"}
                 for torch, python in picks if python]
    arm = covered_versions(files, "abi3", "aarch64")
    rows = ([f"aarch64/{arm[-2]}:3.11"] if len(arm) > 1 else []) + [f"aarch64/{v}:3.11:uncovered" for v in arm[-1:]]
    if arm and all("3.11" in cpythons(files, row.split("/")[1].split(":")[0], "aarch64") for row in rows):
        jobs.append({"arch": "aarch64", "runner": RUNNERS["aarch64"], "python": "3.11", "rows": " ".join(rows)})
    return jobs


def covered_versions(files: Iterable[str], python_abi: str = "abi3", arch: str = "x86_64") -> List[str]:
    """What a release covers: every torch minor from OLDEST to the newest release on the index, each at its
    newest patch release (pre-releases never; a minor with no usable wheel is left out)."""
    newest: Dict[Tuple[int, int], str] = {}
    for version in torch_wheels(files, python_abi, arch):  # oldest first: a later patch replaces an earlier one
        if is_final(version) and minor_of(version) >= OLDEST:
            newest[minor_of(version)] = public(version)
    return [newest[minor] for minor in sorted(newest)]


def newest(versions: Iterable[str]) -> Optional[str]:
    return max(versions, key=version_key, default=None)


def default_index() -> str:
    """The index pip here would use (PIP_INDEX_URL, else PyPI)."""
    return os.environ.get("PIP_INDEX_URL") or PYPI


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="The torch versions a release covers, from a package index.")
    parser.add_argument("--index", default=None, help="a PEP 503 index (default: PIP_INDEX_URL, else PyPI)")
    parser.add_argument("--python-abi", default="abi3", help="abi3 (default), or a free-threaded tag: cp313t")
    parser.add_argument("--arch", default=platform.machine(), choices=["x86_64", "aarch64"])
    parser.add_argument("--release-matrix", action="store_true", help="release.yml's wheel-matrix jobs, as JSON")
    args = parser.parse_args(argv)
    if args.release_matrix:
        jobs = release_matrix(listing(args.index or default_index(), "torch"))
        if not jobs:
            parser.exit(1, "no torch release on the index for a wheel-matrix job\n")
        print(json.dumps(jobs))
        return 0
    versions = covered_versions(listing(args.index or default_index(), "torch"), args.python_abi, args.arch)
    if not versions:
        parser.exit(1, f"no torch release >= {OLDEST[0]}.{OLDEST[1]} for {args.python_abi} {args.arch} on the index\n")
    print(" ".join(versions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
