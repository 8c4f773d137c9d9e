"""Which torch versions a release covers (scripts/torch_versions.py) and what the torch watch acts on
(scripts/torch_watch.py), fed fake index listings: offline and fast. scripts/torch_watch_rehearsal.sh runs the
watch end to end against a local index."""

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
sys.path.insert(0, SCRIPTS)  # torch_watch imports torch_versions from beside it
import torch_versions as tv  # noqa: E402


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


watch = _load("torch_watch")


def wheels(*versions, tag="cp311-cp311", platform="manylinux_2_28_x86_64"):
    return [f"torch-{v}-{tag}-{platform}.whl" for v in versions]


# What PyPI listed for torch in November 2026, reduced to what decides (the real page has 987 files).
PYPI_2026 = (wheels("2.3.1", "2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1",
                    "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0")
             + wheels("2.4.1", "2.15.0", platform="manylinux_2_28_aarch64")
             + wheels("2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", tag="cp313-cp313t")
             + wheels("2.15.0", tag="cp315-cp315") + ["torch-2.15.0.tar.gz"])
HAND_KEPT = "2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0".split()


def test_every_minor_from_2_4_to_the_newest_at_its_newest_patch_as_the_hand_kept_list_was():
    assert tv.covered_versions(PYPI_2026) == HAND_KEPT


def test_a_new_minor_on_the_index_is_covered_by_the_next_build_without_editing_anything():
    assert tv.covered_versions(PYPI_2026 + wheels("2.16.0"))[-2:] == ["2.15.0", "2.16.0"]
    assert tv.covered_versions(PYPI_2026 + wheels("2.15.1"))[-1] == "2.15.1"


def test_pre_releases_dev_builds_and_older_minors_are_never_covered():
    listing = PYPI_2026 + wheels("2.16.0rc1", "2.16.0.dev20261201", "2.16.0a0")
    assert tv.covered_versions(listing) == HAND_KEPT
    assert tv.covered_versions(wheels("2.3.1", "2.4.0"))[0] == "2.4.0"


def test_only_wheels_a_build_can_use_count_for_its_python_and_architecture():
    # cp313t: 2.12.1 has no cp313t wheel, so 2.12.0 serves that minor; nothing before 2.7 exists for it.
    assert tv.covered_versions(PYPI_2026, "cp313t") == ["2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0"]
    assert tv.covered_versions(PYPI_2026, "abi3", "aarch64") == ["2.4.1", "2.15.0"]
    assert tv.covered_versions(wheels("2.16.0", tag="cp315-cp315") + wheels("2.15.0")) == ["2.15.0"]
    assert tv.covered_versions(wheels("2.16.0", platform="macosx_11_0_arm64") + wheels("2.15.0")) == ["2.15.0"]


def test_a_local_version_part_is_dropped_from_what_is_asked_for():
    assert tv.covered_versions(wheels("2.15.0+cpu")) == ["2.15.0"]


@pytest.mark.parametrize("lower, higher", [
    ("2.9.1", "2.10.0"), ("2.16.0.dev20261201", "2.16.0a1"), ("2.16.0a1", "2.16.0b1"), ("2.16.0b1", "2.16.0rc1"),
    ("2.16.0rc1", "2.16.0rc2"), ("2.16.0rc2", "2.16.0"), ("2.16.0", "2.16.0.post1"), ("0.1.0.post1", "0.1.0.post2"),
    ("0.1.0.post2", "0.1.1"), ("2.15", "2.15.1"),
])
def test_versions_sort_as_pep_440_says(lower, higher):
    assert tv.version_key(lower) < tv.version_key(higher)


def test_the_index_page_gives_names_and_urls_without_yanked_files():
    page = """<html><body>
      <a href="../../packages/ab/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00">x</a>
      <a href="https://download.pytorch.org/whl/test/torch-2.16.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">y</a>
      <a href="/packages/torch-2.15.1-cp311-cp311-manylinux_2_28_x86_64.whl" data-yanked="broken">z</a>
    </body></html>"""
    files = tv.files_on_page(page, "https://example.org/simple/torch/")
    assert list(files) == ["torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                           "torch-2.16.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert files["torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"] == \
        "https://example.org/packages/ab/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00"
    assert tv.covered_versions(files) == ["2.15.0", "2.16.0"]


# ---- the watch's decisions --------------------------------------------------------------------------

COVERED_TO_2_15 = {(2, minor) for minor in range(4, 16)}


def test_a_new_minor_release_is_acted_on_and_a_covered_one_is_not():
    assert watch.uncovered("2.16.0", None, COVERED_TO_2_15) == [("2.16.0", False)]
    assert watch.uncovered("2.15.1", None, COVERED_TO_2_15) == []


def test_a_pre_release_of_a_new_minor_is_acted_on_as_a_pre_release_once_per_minor():
    assert watch.uncovered("2.15.0", "2.16.0", COVERED_TO_2_15) == [("2.16.0", True)]
    assert watch.uncovered("2.16.0", "2.16.1", COVERED_TO_2_15) == [("2.16.0", False)]
    assert watch.uncovered("2.16.0", "2.17.0", COVERED_TO_2_15) == [("2.16.0", False), ("2.17.0", True)]


def test_the_test_channel_counts_only_where_it_is_ahead_of_the_release():
    test_channel = wheels("2.15.0+cpu", "2.16.0+cpu", "2.16.0") + wheels("2.17.0", tag="cp39-cp39")
    assert watch.newer_prerelease(test_channel, "2.15.0") == "2.16.0"
    assert watch.newer_prerelease(test_channel, "2.16.0") is None
    assert watch.newer_prerelease([], "2.15.0") is None


def test_post_release_versions_count_up():
    assert [watch.post_release(v) for v in ("0.1.0", "0.1.0.post1", "0.2.3.post9")] == \
        ["0.1.0.post1", "0.1.0.post2", "0.2.3.post10"]


def fake_wheel(**files):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return zipfile.ZipFile(data)


def test_coverage_is_read_from_the_wheels_record_or_before_it_existed_from_its_libraries():
    recorded = fake_wheel(**{watch.RECORD: "2.13.0\n2.14.1\n",
                             "torch_dlpack_bridge/_lib/libtdb_torch2.13_cxx11.so": ""})
    assert watch.covered_minors(recorded) == {(2, 13), (2, 14)}
    older = fake_wheel(**{f"torch_dlpack_bridge/_lib/libtdb_torch2.{m}_cxx11.so": "" for m in (4, 15)})
    assert watch.covered_minors(older) == {(2, 4), (2, 15)}


def test_the_newest_release_of_the_package_is_its_newest_x86_64_abi3_wheel():
    names = ["torch_dlpack_bridge-0.1.0-cp39-abi3-manylinux_2_24_x86_64.whl",
             "torch_dlpack_bridge-0.1.0.post1-cp39-abi3-manylinux_2_24_x86_64.whl",
             "torch_dlpack_bridge-0.1.0.post1-cp39-abi3-manylinux_2_24_aarch64.whl",
             "torch_dlpack_bridge-0.2.0rc1-cp39-abi3-manylinux_2_24_x86_64.whl",
             "torch_dlpack_bridge-0.1.0.post1.tar.gz"]
    files = {name: f"http://index/{name}" for name in names}
    assert watch.newest_package_wheel(files) == ("0.1.0.post1", files[names[1]])


def test_the_changelog_entry_goes_above_the_newest_release():
    text = "# Changelog\n\nWhat changes.\n\n## 0.1.0: the first release\n\nStuff.\n"
    updated = watch.add_changelog_entry(text, watch.changelog_entry("0.1.0.post1", "2.16.0"))
    assert updated.index("## 0.1.0.post1: torch 2.16\n") < updated.index("## 0.1.0: the first release")
    assert updated.startswith("# Changelog\n\nWhat changes.\n\n## 0.1.0.post1")


def test_the_issue_names_the_step_and_puts_the_compilers_errors_first():
    output = ("building\n" + "noise\n" * 5000 + "  x.cpp:3:1: error: 'THPVariable_Unpack' was not declared\n"
              "error: subprocess-exited-with-error\nend\n")
    failed = watch.StepFailed("building the table", ["scripts/build_wheels.sh", "2.16.0"], output)
    text = watch.issue_text("2.16.0", False, failed)
    title, body = text.split("\n\n", 1)
    assert title == "torch watch: torch 2.16.0 (release) fails at building the table"
    errors = body[body.index("Errors:"):body.index("End of its output")]
    assert errors == "Errors:\n```\nx.cpp:3:1: error: 'THPVariable_Unpack' was not declared\n```\n\n"
    assert len(body) < 25000 and body.rstrip().endswith("end\n```")


def repository(path, *tags):
    """A git repository of one commit (a README) carrying `tags`."""
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README.md").write_text("x\n")
    subprocess.run(git + ["add", "README.md"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    for tag in tags:
        subprocess.run(git + ["tag", tag], check=True)
    return argparse.Namespace(repo=str(path), test_channel="", python="3.11", publish_hours=6.0)


def test_a_post_release_tagged_within_the_hours_is_neither_built_nor_tagged_again(tmp_path):
    args = repository(tmp_path / "repo", "v0.1.0", "v0.1.0.post1")
    done = watch.act("2.16.0", False, "0.1.0", args, str(tmp_path))
    assert done["result"] == "v0.1.0.post1 is already tagged: waiting for release.yml to publish it"
    assert os.listdir(tmp_path) == ["repo"]


def test_a_release_from_before_the_watch_is_a_failure_to_release_by_hand(tmp_path):
    args = repository(tmp_path / "repo", "v0.1.0")
    with pytest.raises(watch.StepFailed) as failed:
        watch.act("2.16.0", False, "0.1.0", args, str(tmp_path))
    assert failed.value.step == "checking out v0.1.0" and "release this torch by hand" in failed.value.output


def test_a_post_release_tag_the_index_does_not_hold_hours_later_leaves_an_issue(tmp_path):
    """release.yml failed on the tag, or never ran: past --publish-hours the watch stops waiting in silence."""
    args = repository(tmp_path / "repo", "v0.1.0", "v0.1.0.post1")
    args.publish_hours = 0.0
    with pytest.raises(watch.NeedsPerson) as issue:
        watch.act("2.16.0", False, "0.1.0", args, str(tmp_path))
    assert issue.value.name == "v0.1.0.post1"
    assert issue.value.title == "torch watch: v0.1.0.post1 was tagged 0 h ago and is not on the index"
    assert "gh workflow run release.yml --ref v0.1.0.post1" in issue.value.body
    assert os.listdir(tmp_path) == ["repo"]  # nothing built or tagged


# ---- the watch as the workflow runs it, on fake index listings ----------------------------------------------

def run_watch(monkeypatch, tmp_path, torch_files, package_files=()):
    """scripts/torch_watch.py's main() with the index's torch and package pages given: its exit status, its
    issue files ({name: text}) and watch.json."""
    pages = {"torch": {name: f"http://index/{name}" for name in torch_files},
             watch.PROJECT: {name: f"http://index/{name}" for name in package_files}}
    monkeypatch.setattr(watch.tv, "listing", lambda index, project: pages[project])
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    status = watch.main(["--out", str(out), "--test-channel", ""])
    issues = {name: (out / name).read_text() for name in sorted(os.listdir(out)) if name.startswith("issue-")}
    return status, issues, json.loads((out / "watch.json").read_text())


def test_before_the_first_release_a_new_torch_minor_leaves_its_own_issue(monkeypatch, tmp_path):
    status, issues, report = run_watch(monkeypatch, tmp_path, PYPI_2026)
    assert status == 1 and list(issues) == ["issue-torch-2.15.md"], issues
    title, body = issues["issue-torch-2.15.md"].split("\n\n", 1)
    assert title == "torch 2.15 is out; no wheel of this project covers it"
    assert body.startswith("torch 2.15.0 is torch's newest release on ") and "To release: " in body
    assert 'docs/development.md, "The first release, by hand"' in body
    assert report["package"] is None and report["acted"][0]["result"] == title
    # A patch of the same minor: the same title, so the same open issue (scripts/file_issues.sh files it once);
    # the next minor: an issue of its own.
    patch = run_watch(monkeypatch, tmp_path, PYPI_2026 + wheels("2.15.1"))[1]
    assert {name: text.split("\n", 1)[0] for name, text in patch.items()} == {"issue-torch-2.15.md": title}
    _, newer, _ = run_watch(monkeypatch, tmp_path, PYPI_2026 + wheels("2.16.0"))
    assert newer["issue-torch-2.16.md"].startswith("torch 2.16 is out; no wheel of this project covers it\n\n")


def test_a_minor_with_wheels_only_for_other_cpythons_is_still_found():
    """torch 2.16 without a CPython 3.11 wheel (or only for aarch64) is out: the watch acts on it, and the
    build that needs cp311 fails loudly instead of the watch saying nothing to do every day."""
    for extra in (wheels("2.16.0", tag="cp314-cp314"), wheels("2.16.0", platform="manylinux_2_28_aarch64")):
        assert tv.linux_versions(PYPI_2026 + extra)[-1] == "2.16.0"
        assert tv.torch_wheels(PYPI_2026 + extra)[-1] == "2.15.0"  # what the build can use
    assert tv.linux_versions(PYPI_2026 + wheels("2.16.0", platform="macosx_11_0_arm64"))[-1] == "2.15.0"
    assert tv.linux_versions(wheels("2.16.0+cpu"))[-1] == "2.16.0"


def test_a_new_minor_on_other_cpythons_only_is_acted_on(monkeypatch, tmp_path):
    package = "torch_dlpack_bridge-0.1.0-cp39-abi3-manylinux_2_24_x86_64.whl"
    wheel = tmp_path / package
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(watch.RECORD, "".join(f"2.{m}.0\n" for m in range(4, 16)))
    monkeypatch.setattr(watch.urllib.request, "urlretrieve", lambda url, path: shutil.copy(wheel, path))
    acted = []
    monkeypatch.setattr(watch, "act", lambda torch, pre, *_: acted.append(torch) or {"torch": torch, "result": "x"})
    status, issues, report = run_watch(monkeypatch, tmp_path, PYPI_2026 + wheels("2.16.0", tag="cp314-cp314"),
                                       [package])
    assert status == 0 and acted == ["2.16.0"] and report["torch_release"] == "2.16.0", report


# ---- release.yml's wheel-matrix rows ------------------------------------------------------------------

def listing_with_pythons():
    """A listing where each torch has wheels for the CPythons it supported (a reduced PyPI)."""
    files = []
    for version, pythons in (("2.4.1", range(8, 13)), ("2.13.0", range(10, 15)), ("2.14.1", range(10, 15)),
                             ("2.15.0", range(10, 16))):
        for arch in ("x86_64", "aarch64"):
            files += [f"torch-{version}-cp3{p}-cp3{p}-manylinux_2_28_{arch}.whl" for p in pythons]
        files += [f"torch-{version}-cp313-cp313t-manylinux_2_28_x86_64.whl"]
    return files


def test_release_matrix_rows_are_the_oldest_and_newest_minors_read_from_the_index():
    jobs = tv.release_matrix(listing_with_pythons())
    assert [(j["arch"], j["runner"], j["python"], j["rows"]) for j in jobs] == [
        ("x86_64", "ubuntu-24.04", "3.9", "2.4.1:3.9"),  # the oldest minor on its oldest CPython a runner has
        ("x86_64", "ubuntu-24.04", "3.11", "2.14.1:3.11"),
        ("x86_64", "ubuntu-24.04", "3.14", "2.15.0:3.14"),  # the newest on its newest (3.15: not on runners yet)
        ("aarch64", "ubuntu-24.04-arm", "3.11", "aarch64/2.14.1:3.11 aarch64/2.15.0:3.11:uncovered")]
    newer = tv.release_matrix(listing_with_pythons() + wheels("2.16.0", tag="cp312-cp312")
                              + wheels("2.16.0", tag="cp311-cp311"))
    assert [j["rows"] for j in newer][1:3] == ["2.15.0:3.11", "2.16.0:3.12"]


def test_release_matrix_prints_json_for_the_workflow(monkeypatch, capsys):
    monkeypatch.setattr(tv, "listing", lambda index, project: {name: "" for name in listing_with_pythons()})
    assert tv.main(["--index", "http://index", "--release-matrix"]) == 0
    assert json.loads(capsys.readouterr().out) == tv.release_matrix(listing_with_pythons())


# ---- the issue tracker and the release job's pushes, rehearsed locally ------------------------------------

def issue_file(path, title, body="body\n"):
    path.write_text(f"{title}\n\n{body}")
    return str(path)


def file_issues(tmp_path, *args):
    return subprocess.run([os.path.join(SCRIPTS, "file_issues.sh"), *args], capture_output=True, text=True,
                          env=dict(os.environ, TDB_FORGE_DIR=str(tmp_path / "forge"), RUN_URL="http://run/1"),
                          timeout=60)


def filed(tmp_path):
    folder = tmp_path / "forge" / "issues"
    return sorted(p.read_text() for p in folder.iterdir()) if folder.is_dir() else []


def test_an_issue_is_filed_once_while_one_with_its_title_is_open(tmp_path):
    a = issue_file(tmp_path / "a.md", "torch 2.16 is out; no wheel of this project covers it", "To release: x\n")
    b = issue_file(tmp_path / "b.md", "torch watch: v0.1.0.post1 was tagged 7 h ago and is not on the index")
    first = file_issues(tmp_path, a, b)
    assert first.returncode == 0 and first.stdout.count("filed: ") == 2, first
    assert filed(tmp_path)[0] == ("torch 2.16 is out; no wheel of this project covers it\n\nTo release: x\n\n"
                                  "Run: http://run/1\n")
    again = file_issues(tmp_path, a, b)
    assert again.returncode == 0 and again.stdout.count("already open: ") == 2 and len(filed(tmp_path)) == 2
    for issue in (tmp_path / "forge" / "issues").iterdir():  # closed: filed again on the next failure
        issue.unlink()
    assert file_issues(tmp_path, a).stdout == "filed: torch 2.16 is out; no wheel of this project covers it\n"


def test_a_failed_release_files_one_issue_naming_the_tag(tmp_path):
    for _ in range(2):
        result = file_issues(tmp_path, "--release-failed", "v0.1.0.post1")
        assert result.returncode == 0, result
    issues = filed(tmp_path)
    assert len(issues) == 1 and issues[0].startswith("release: v0.1.0.post1 failed, and may be published in part\n")
    assert "gh workflow run release.yml --ref v0.1.0.post1" in issues[0] and "Run: http://run/1" in issues[0]


def test_the_release_job_pushes_the_tag_and_a_branch_and_proposes_the_commit_to_main(tmp_path):
    """scripts/torch_watch_release.sh with a bare repository as GitHub: the tag and torch-watch/TAG arrive with
    the post-release commit, release.yml is started on the tag and the pull request goes to main."""
    source = tmp_path / "watch"
    repository(source, "v0.1.0")
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]
    (source / "CHANGELOG.md").write_text("## 0.1.0.post1: torch 2.16\n")
    subprocess.run(git + ["add", "CHANGELOG.md"], check=True)
    subprocess.run(git + ["commit", "-qm", "0.1.0.post1: a prebuilt table for torch 2.16.0"], check=True)
    subprocess.run(git + ["tag", "-a", "v0.1.0.post1", "-m", "x"], check=True)
    subprocess.run(git + ["bundle", "create", str(tmp_path / "release.bundle"), "refs/tags/v0.1.0.post1"],
                   check=True, capture_output=True)
    remote = tmp_path / "github.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    result = subprocess.run([os.path.join(SCRIPTS, "torch_watch_release.sh"), str(tmp_path / "release.bundle"),
                             "v0.1.0.post1"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, REMOTE=str(remote), TDB_FORGE_DIR=str(tmp_path / "forge")))
    assert result.returncode == 0, result
    commit = subprocess.run(git[:3] + ["rev-parse", "v0.1.0.post1^{commit}"], capture_output=True,
                            text=True).stdout.strip()
    pushed = subprocess.run(["git", "-C", str(remote), "show-ref"], capture_output=True, text=True).stdout
    assert f"{commit} refs/heads/torch-watch/v0.1.0.post1" in pushed and "refs/tags/v0.1.0.post1" in pushed
    assert (tmp_path / "forge" / "runs.log").read_text() == "release.yml --ref v0.1.0.post1\n"
    pull = (tmp_path / "forge" / "pulls" / "torch-watch-v0.1.0.post1.md").read_text()
    assert pull.startswith("0.1.0.post1: a prebuilt table for torch 2.16.0\n\nbase: main, head: "
                           "torch-watch/v0.1.0.post1\n")
