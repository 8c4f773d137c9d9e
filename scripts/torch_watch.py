#!/usr/bin/env python3
"""The torch watch: follows torch's releases by machine (.github/workflows/torch-watch.yml runs it daily;
scripts/torch_watch_rehearsal.sh runs it here against a local index).

1. asks the index (PIP_INDEX_URL, else PyPI) for torch's newest release (on a Linux wheel of any CPython and
   architecture) and torch's test channel for a newer pre-release, and reads which torch minors the newest
   release of this package covers (the record in its wheel, torch_dlpack_bridge/_lib/torch_versions.txt);
   where the index has no release of this package yet, it leaves an issue for torch's newest minor ("torch
   2.16 is out; no wheel of this project covers it"), whose body says how to make the first release by hand,
   and stops there;
2. for each torch minor it does not cover: checks the release's tag (v<version>) out into a worktree and, with
   that release's own scripts, builds the table for that torch (scripts/build_wheels.sh VERSION) and runs its
   wheel-matrix row on the wheel (scripts/wheel_matrix.sh VERSION:PYTHON: install, the main job and the smoke
   tests, no compiler reachable at import);
3. for a release (never for a pre-release), prepares the post-release in that worktree: the version
   <version>.postN in torch_dlpack_bridge/_build.py, a CHANGELOG entry, a commit and the tag v<version>.postN.
   The workflow pushes the tag and a branch with its commit, opens a pull request of it to main, and starts
   .github/workflows/release.yml on the tag, which builds, checks and publishes every artifact (its torch
   versions, from scripts/torch_versions.py, now include the new minor). A post-release tagged more than
   --publish-hours ago that the index still does not hold leaves an issue (release.yml failed, or never ran).

What it found and did goes to OUT/watch.json; a prepared release to OUT/release.env (TAG=, WORKTREE=); what needs
a person to OUT/issue-<name>.md (first line the title, then the body; for a failed step: the step, its command and
the end of its output, compiler errors first), which the workflow opens as an issue unless one with the same
title is open (scripts/file_issues.sh). Exit status: 0 (nothing to do, or done), 1 (an issue was left).

Usage: scripts/torch_watch.py --out DIR [--test-channel URL|''] [--python 3.11] [--repo DIR] [--publish-hours 6]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from typing import Dict, Iterable, List, Optional, Set, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_versions as tv  # noqa: E402  (beside this script)

PROJECT = "torch_dlpack_bridge"
RECORD = f"{PROJECT}/_lib/torch_versions.txt"
_LIBRARY = re.compile(rf"{PROJECT}/_lib/libtdb_torch(\d+)\.(\d+)_")


def newest_package_wheel(files: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """(version, url) of the x86_64 abi3 wheel of this package's newest release on the index; None before the
    first."""
    wheels = {}
    for name, url in files.items():
        wheel = tv.parse_wheel(name, PROJECT)
        if (wheel is not None and wheel.abi == "abi3" and wheel.platform.endswith("_x86_64")
                and tv.is_final(wheel.version)):
            wheels[wheel.version] = url
    version = tv.newest(wheels)
    return None if version is None else (version, wheels[version])


def covered_minors(wheel: zipfile.ZipFile) -> Set[Tuple[int, int]]:
    """The torch minors a wheel of this package holds a library for: its record, or (a wheel made before the
    record existed) the minors in its libraries' names."""
    names = wheel.namelist()
    if RECORD in names:
        return {tv.minor_of(v) for v in wheel.read(RECORD).decode().split()}
    return {(int(m.group(1)), int(m.group(2))) for m in map(_LIBRARY.match, names) if m}


def uncovered(release: Optional[str], prerelease: Optional[str],
              covered: Set[Tuple[int, int]]) -> List[Tuple[str, bool]]:
    """The torch versions to act on, as (version, is a pre-release): the newest release and the newer
    pre-release, each where its minor is not covered (once per minor: the release first)."""
    found, minors = [], set(covered)
    for version, pre in ((release, False), (prerelease, True)):
        if version is not None and tv.minor_of(version) not in minors:
            found.append((version, pre))
            minors.add(tv.minor_of(version))
    return found


def newer_prerelease(test_files: Iterable[str], release: Optional[str]) -> Optional[str]:
    """The newest torch on the test channel, where it is newer than the newest release (its +local part
    dropped: what `pip install torch==V` asks for)."""
    candidate = tv.newest(tv.public(v) for v in tv.torch_wheels(test_files))
    if candidate is None or (release is not None and tv.version_key(candidate) <= tv.version_key(release)):
        return None
    return candidate


def post_release(version: str) -> str:
    """The next post-release: 0.1.0 -> 0.1.0.post1, 0.1.0.post1 -> 0.1.0.post2."""
    base, _, post = version.partition(".post")
    return f"{base}.post{int(post or 0) + 1}"


def changelog_entry(version: str, torch: str) -> str:
    major, minor = tv.minor_of(torch)
    return (f"## {version}: torch {major}.{minor}\n\n"
            f"A prebuilt table library for **torch {major}.{minor}** (built against torch {torch}), so that it is "
            f"not built at import; nothing else changes. Prepared by the torch watch "
            f"(`.github/workflows/torch-watch.yml`) once its table built and its wheel-matrix row passed.\n\n")


def add_changelog_entry(text: str, entry: str) -> str:
    """`entry` above the newest release's section (the first `## ` heading)."""
    at = text.find("\n## ")
    return text + "\n" + entry if at < 0 else text[:at + 1] + entry + text[at + 1:]


class StepFailed(Exception):
    def __init__(self, step: str, command: List[str], output: str):
        super().__init__(step)
        self.step, self.command, self.output = step, command, output


def run_step(step: str, command: List[str], log_path: str, cwd: str, env: Optional[Dict[str, str]] = None) -> float:
    """Runs one step, its output to the terminal and to `log_path`; its seconds, or StepFailed."""
    print(f"== torch watch {time.strftime('%H:%M:%S', time.gmtime())} {step}: {' '.join(command)}", flush=True)
    start = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        process.wait()
    seconds = time.monotonic() - start
    if process.returncode != 0:
        with open(log_path) as f:
            raise StepFailed(step, command, f.read())
    print(f"== torch watch: {step} passed in {seconds:.0f} s", flush=True)
    return seconds


def issue_text(torch: str, pre: bool, failed: StepFailed) -> str:
    """The issue to open: a title line, then the step, its command, the compiler's errors and the end of its
    output."""
    kind = "pre-release" if pre else "release"
    lines = failed.output.splitlines()
    errors = ([line.strip() for line in lines if re.search(r":\d+:\d+: (fatal )?error:", line)]  # a compiler's
              or [line.strip() for line in lines if re.search(r"\berror\b", line, re.I)])[:20]
    tail = failed.output[-20000:].rstrip("\n")
    return (f"torch watch: torch {torch} ({kind}) fails at {failed.step}\n\n"
            f"The torch watch (`scripts/torch_watch.py`) found torch {torch} (a {kind}), which no release of this "
            f"package covers, and {failed.step} failed: nothing was released.\n\n"
            f"Command: `{' '.join(failed.command)}`\n\n"
            + ("Errors:\n```\n" + "\n".join(errors) + "\n```\n\n" if errors else "")
            + f"End of its output:\n```\n{tail}\n```\n")


class NeedsPerson(Exception):
    """Not a failed step: something the watch cannot do, for an issue (`name`: its file, issue-<name>.md)."""

    def __init__(self, name: str, title: str, body: str):
        super().__init__(title)
        self.name, self.title, self.body = name, title, body


FIRST_RELEASE = "docs/development.md, \"The first release, by hand\""


def first_release_issue(torch: str, index: str) -> NeedsPerson:
    """Before the first release: torch's newest minor, which no wheel covers; one issue per minor."""
    major, minor = tv.minor_of(torch)
    return NeedsPerson(
        f"torch-{major}.{minor}", f"torch {major}.{minor} is out; no wheel of this project covers it",
        f"torch {torch} is torch's newest release on {index}, and the index holds no release of {PROJECT} yet, so no "
        f"wheel of it covers torch {major}.{minor} (an install builds the table at import, or keeps torch's own).\n\n"
        f"To release: make the first release by hand ({FIRST_RELEASE}): PyPI's trusted publisher and the `pypi` "
        f"environment set once, the version and CHANGELOG entry on main, then the tag `v<version>` pushed, which "
        f"runs release.yml (every torch minor on the index, {major}.{minor} included). From then on this watch "
        f"releases a post-release for each new torch minor by itself.\n")


def tagged_hours(repo: str, tag: str) -> Optional[float]:
    """Hours since the tag `tag` was made in `repo`; None where there is no such tag."""
    made = subprocess.run(["git", "for-each-ref", "--format=%(creatordate:unix)", f"refs/tags/{tag}"], cwd=repo,
                          capture_output=True, text=True).stdout.strip()
    return (time.time() - int(made)) / 3600 if made else None


def act(torch: str, pre: bool, package: str, args, out: str) -> Dict[str, object]:
    """Builds and tests the table for `torch` at the tag of `package` (this package's newest release); for a
    release, prepares the post-release there. What was done, with each step's seconds."""
    done: Dict[str, object] = {"torch": torch, "pre_release": pre}
    tree = os.path.join(out, f"release-{torch}")
    tag = f"v{package}"
    version = post_release(package)
    hours = None if pre else tagged_hours(args.repo, f"v{version}")
    if hours is not None and hours > args.publish_hours:  # release.yml failed, or never ran
        raise NeedsPerson(
            f"v{version}", f"torch watch: v{version} was tagged {hours:.0f} h ago and is not on the index",
            f"The torch watch tagged v{version} (a prebuilt table for torch {torch}) {hours:.0f} hours ago, and the "
            f"index still holds {PROJECT} {package} as its newest release: release.yml failed on the tag, or never "
            f"ran. Look at its runs for v{version} (a failed run leaves an issue of its own); to retry, run it on "
            f"the tag: `gh workflow run release.yml --ref v{version}`.\n")
    if hours is not None:
        done["result"] = f"v{version} is already tagged: waiting for release.yml to publish it"
        return done
    extra = [os.environ.get("PIP_EXTRA_INDEX_URL", ""), args.test_channel] if pre else []
    env = {"PIP_EXTRA_INDEX_URL": " ".join(filter(None, extra))} if pre else {}  # where a pre-release's torch is
    checkout = ["git", "worktree", "add", "--force", "--detach", tree, tag]
    run_step(f"checking out {tag}", checkout, os.path.join(out, f"checkout-{torch}.log"), args.repo)
    if not os.path.isfile(os.path.join(tree, "scripts", "torch_versions.py")):
        raise StepFailed(f"checking out {tag}", checkout, f"{tag} predates the torch watch (its build_wheels.sh "
                                                          f"lists torch by hand): release this torch by hand")
    wheels = os.path.join(out, f"wheel-{torch}")
    done["build_s"] = run_step("building the table", ["scripts/build_wheels.sh", torch],
                               os.path.join(out, f"build-{torch}.log"), tree, dict(env, TDB_WHEEL_DIR=wheels))
    done["row_s"] = run_step("the wheel-matrix row", ["scripts/wheel_matrix.sh", f"{torch}:{args.python}"],
                             os.path.join(out, f"row-{torch}.log"), tree,
                             dict(env, TDB_WHEEL_DIR=wheels, TDB_MATRIX_DIR=os.path.join(out, f"matrix-{torch}"),
                                  TDB_MATRIX_OUT=os.path.join(out, f"wheel_matrix-{torch}.md")))
    if pre:
        done["result"] = "pre-release built and tested (never released)"
        return done
    build_py = os.path.join(tree, "torch_dlpack_bridge", "_build.py")
    with open(build_py) as f:
        text = f.read()
    with open(build_py, "w") as f:
        f.write(text.replace(f'PACKAGE_VERSION = "{package}"', f'PACKAGE_VERSION = "{version}"', 1))
    with open(os.path.join(tree, "CHANGELOG.md")) as f:
        text = f.read()
    with open(os.path.join(tree, "CHANGELOG.md"), "w") as f:
        f.write(add_changelog_entry(text, changelog_entry(version, torch)))
    git = ["git", "-c", "user.name=torch watch", "-c", "user.email=torch-watch@users.noreply.github.com"]
    run_step("committing the release", git + ["commit", "-am", f"{version}: a prebuilt table for torch {torch}"],
             os.path.join(out, f"commit-{torch}.log"), tree)
    run_step("tagging it", git + ["tag", "-a", f"v{version}", "-m", f"torch_dlpack_bridge {version}"],
             os.path.join(out, f"tag-{torch}.log"), tree)
    with open(os.path.join(out, "release.env"), "w") as f:
        f.write(f"TAG=v{version}\nWORKTREE={tree}\n")
    done["result"] = f"release v{version} prepared (tag v{version} in {tree})"
    return done


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where the logs, watch.json, release.env and issues go")
    parser.add_argument("--test-channel", default=tv.TEST_CHANNEL, help="torch's test channel ('' to skip it)")
    parser.add_argument("--python", default="3.11", help="the CPython of the wheel-matrix row")
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the git repository holding the release tags (default: this checkout)")
    parser.add_argument("--publish-hours", type=float, default=6.0,
                        help="how long a post-release tag may wait for the index before an issue is left (6)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    index = tv.default_index()
    release = tv.newest(v for v in tv.linux_versions(tv.listing(index, "torch")) if tv.is_final(v))
    prerelease = newer_prerelease(tv.listing(args.test_channel, "torch"), release) if args.test_channel else None
    newest_package = newest_package_wheel(tv.listing(index, PROJECT))
    if newest_package is None:
        return first_release(release, prerelease, index, out)
    package, url = newest_package
    wheel_path = os.path.join(out, url.rsplit("/", 1)[-1].split("#")[0])
    urllib.request.urlretrieve(url, wheel_path)
    with zipfile.ZipFile(wheel_path) as wheel:
        covered = covered_minors(wheel)
    todo = uncovered(release, prerelease, covered)
    report = {"index": index, "torch_release": release, "torch_prerelease": prerelease, "package": package,
              "covered": [f"{a}.{b}" for a, b in sorted(covered)], "acted": []}
    print(f"torch watch: torch {release} is torch's newest release on {index}"
          f"{f', {prerelease} its newest pre-release on {args.test_channel}' if prerelease else ''}; "
          f"{PROJECT} {package} covers torch {', '.join(report['covered'])}: "
          f"{'new: ' + ', '.join(v for v, _ in todo) if todo else 'nothing to do'}", flush=True)
    status = 0
    for torch, pre in todo:
        try:
            report["acted"].append(act(torch, pre, package, args, out))
        except StepFailed as failed:
            with open(os.path.join(out, f"issue-{torch}.md"), "w") as f:
                f.write(issue_text(torch, pre, failed))
            report["acted"].append({"torch": torch, "pre_release": pre, "result": f"FAILED at {failed.step}"})
            print(f"torch watch: {failed.step} failed for torch {torch}: see {out}/issue-{torch}.md", flush=True)
            status = 1
        except NeedsPerson as issue:
            report["acted"].append({"torch": torch, "pre_release": pre, "result": issue.title})
            leave_issue(out, issue)
            status = 1
    with open(os.path.join(out, "watch.json"), "w") as f:
        json.dump(report, f, indent=1)
    return status


def leave_issue(out: str, issue: NeedsPerson) -> None:
    with open(os.path.join(out, f"issue-{issue.name}.md"), "w") as f:
        f.write(f"{issue.title}\n\n{issue.body}")
    said = issue.title if issue.title.startswith("torch watch: ") else f"torch watch: {issue.title}"
    print(f"{said}: see {out}/issue-{issue.name}.md", flush=True)


def first_release(release: Optional[str], prerelease: Optional[str], index: str, out: str) -> int:
    """Before the first release of this package: the issue for torch's newest minor (nothing is built)."""
    report = {"index": index, "torch_release": release, "torch_prerelease": prerelease, "package": None,
              "covered": [], "acted": []}
    print(f"torch watch: torch {release} is torch's newest release on {index}; {PROJECT} has no release there yet",
          flush=True)
    status = 0
    if release is not None:
        issue = first_release_issue(release, index)
        report["acted"].append({"torch": release, "pre_release": False, "result": issue.title})
        leave_issue(out, issue)
        status = 1
    with open(os.path.join(out, "watch.json"), "w") as f:
        json.dump(report, f, indent=1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
