"""What PyPI and pip read about a release: the version, written once (torch_dlpack_bridge/_build.py), is the
distribution's and the one `python -m torch_dlpack_bridge` prints; the README as PyPI shows it has no relative
link left (each points into the public repository at the release's tag). Metadata only: nothing is compiled
(setuptools' prepare_metadata_for_build_wheel on a copy of the tracked files, a few seconds).
"""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from email.parser import Parser

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def dist_info(tmp_path_factory):
    """The .dist-info folder a wheel of a copy of the tracked files would carry, with PACKAGE_VERSION set to
    9.8.7 in that copy only."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tar = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=ROOT, input=files, capture_output=True,
                         check=True).stdout
    subprocess.run(["tar", "-xf", "-", "-C", str(src)], input=tar, check=True)
    build = src / "torch_dlpack_bridge" / "_build.py"
    text, count = re.subn(r'^PACKAGE_VERSION = "[^"]+"', 'PACKAGE_VERSION = "9.8.7"', build.read_text(),
                          flags=re.M)
    assert count == 1
    build.write_text(text)
    out = tmp_path_factory.mktemp("meta")
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")
    result = subprocess.run([sys.executable, "-c", code, str(out)], cwd=str(src), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return out / result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def metadata_of_version(dist_info):
    return Parser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8"))


def test_version_is_written_once_in_build_module(metadata_of_version):
    assert metadata_of_version["Version"] == "9.8.7"
    urls = dict(u.split(", ", 1) for u in metadata_of_version.get_all("Project-URL"))
    assert urls["Changelog"].endswith("/blob/v9.8.7/CHANGELOG.md")


def test_pypi_page_resolves_every_relative_link_of_readme(metadata_of_version):
    description = metadata_of_version.get_payload()
    assert metadata_of_version["Description-Content-Type"] == "text/markdown"
    assert description.startswith("# torch_dlpack_bridge")
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert len(targets) > 10  # the README's links were found
    urls = dict(u.split(", ", 1) for u in metadata_of_version.get_all("Project-URL"))
    prefix = f"{urls['Source']}/blob/v9.8.7/"
    for target in targets:
        assert target.startswith(("https://", "#")), f"relative link on PyPI: {target}"
        if target.startswith(prefix):  # a file of the repository: it exists in this checkout
            path = target[len(prefix):].split("#")[0]
            assert os.path.exists(os.path.join(ROOT, path)), target


def test_metadata_a_user_and_pypi_expect(metadata_of_version):
    meta = metadata_of_version
    assert meta["Name"] == "torch_dlpack_bridge" and meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.9" and meta.get_all("Requires-Dist")[0] == "torch>=2.4"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Documentation", "Source", "Issues", "Changelog"} and meta["Home-page"] == urls["Source"]
    classifiers = meta.get_all("Classifier")
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert any(c.startswith("Programming Language :: Python :: Free Threading") for c in classifiers)
    assert any(c.startswith("Development Status") for c in classifiers)
    trove = pytest.importorskip("trove_classifiers")
    assert set(classifiers) <= set(trove.classifiers), "PyPI refuses an upload with an unknown classifier"


def test_installed_distribution_and_main_job_agree_on_version():
    import torch_dlpack_bridge

    assert importlib.metadata.version("torch_dlpack_bridge") == torch_dlpack_bridge.__version__



PIP23_WHEEL = os.environ.get("TDB_TEST_PIP23_WHEEL")


@pytest.mark.skipif(not PIP23_WHEEL, reason="opt-in, so that the README's test command downloads nothing: "
                                            "TDB_TEST_PIP23_WHEEL=<pip-23.0.1 wheel> (.ci/run downloads it)")
def test_pip_23_shows_the_home_page(dist_info, tmp_path):
    """Debian 12's pip 23.0.1 prints Home-page from that field only (no Project-URL), and License from the
    License field only, which PEP 639 forbids beside License-Expression (PyPI refuses an upload with both, and
    setuptools a license classifier beside an expression): its License line stays empty, newer pip prints
    License-Expression. pip runs from its wheel, without site-packages (-S), so that it sees only this
    metadata."""
    assert os.path.basename(PIP23_WHEEL).startswith("pip-23.0.1-"), PIP23_WHEEL
    site = tmp_path / "site"
    shutil.copytree(dist_info, site / dist_info.name)
    result = subprocess.run([sys.executable, "-S", os.path.join(PIP23_WHEEL, "pip"), "show", "torch_dlpack_bridge"],
                            env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert shown["Name"] == "torch_dlpack_bridge" and shown["Version"] == "9.8.7", result.stdout
    assert shown["Home-page"] == "https://github.com/torch-dlpack-bridge/torch_dlpack_bridge", result.stdout
    assert shown["Requires"] == "torch", result.stdout
