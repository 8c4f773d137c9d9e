"""Which torch versions a release covers (scripts/torch_versions.py) and what the torch watch acts on
(scripts/torch_watch.py), fed fake index listings: offline and fast. scripts/torch_watch_rehearsal.sh runs the
watch end to end against a local index."""

import argparse
import importlib.util
import io
import os
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
    return argparse.Namespace(repo=str(path), test_channel="", python="3.11")


def test_a_post_release_already_tagged_is_neither_built_nor_tagged_again(tmp_path):
    args = repository(tmp_path / "repo", "v0.1.0", "v0.1.0.post1")
    done = watch.act("2.16.0", False, "0.1.0", args, str(tmp_path))
    assert done["result"] == "v0.1.0.post1 is already tagged: waiting for release.yml to publish it"
    assert os.listdir(tmp_path) == ["repo"]


def test_a_release_from_before_the_watch_is_a_failure_to_release_by_hand(tmp_path):
    args = repository(tmp_path / "repo", "v0.1.0")
    with pytest.raises(watch.StepFailed) as failed:
        watch.act("2.16.0", False, "0.1.0", args, str(tmp_path))
    assert failed.value.step == "checking out v0.1.0" and "release this torch by hand" in failed.value.output
