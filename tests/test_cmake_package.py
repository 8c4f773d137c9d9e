"""The CMake package config (torch_dlpack_bridge/cmake): find_package(torch_dlpack_bridge CONFIG) gives the
INTERFACE target torch_dlpack_bridge::headers carrying the include directory, honours version requests,
and is where get_cmake_dir() and `python -m torch_dlpack_bridge --cmake-dir` say it is.

Only CMake's configure step runs here (project(... LANGUAGES NONE): no compiler); the examples compile against
the target in tests/test_bindings.py: nanobind's through scikit-build-core, pybind11's with cmake itself.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

import torch_dlpack_bridge

CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")

PROJECT = """
cmake_minimum_required(VERSION 3.18)
project(probe LANGUAGES NONE)
find_package(torch_dlpack_bridge {request} CONFIG REQUIRED)
get_target_property(inc torch_dlpack_bridge::headers INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(features torch_dlpack_bridge::headers INTERFACE_COMPILE_FEATURES)
message(STATUS "TDB_INCLUDE=${{inc}}")
message(STATUS "TDB_FEATURES=${{features}}")
message(STATUS "TDB_VERSION=${{torch_dlpack_bridge_VERSION}}")
"""


def configure(tmp_path, request=""):
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROJECT.format(request=request))
    cmd = [CMAKE, "-S", str(src), "-B", str(build), f"-Dtorch_dlpack_bridge_DIR={torch_dlpack_bridge.get_cmake_dir()}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def status(res, key):
    return re.search(rf"-- {key}=(.*)", res.stdout).group(1)


def test_cmake_dir_holds_the_config_and_the_command_line_prints_it():
    d = torch_dlpack_bridge.get_cmake_dir()
    assert os.path.isfile(os.path.join(d, "torch_dlpack_bridgeConfig.cmake"))
    assert os.path.isfile(os.path.join(d, "torch_dlpack_bridgeConfigVersion.cmake"))
    out = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "--cmake-dir"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert os.path.samefile(out, d)


def test_target_carries_the_include_directory(tmp_path):
    res = configure(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert os.path.samefile(status(res, "TDB_INCLUDE"), torch_dlpack_bridge.get_include())
    assert status(res, "TDB_FEATURES") == "cxx_std_17"
    assert status(res, "TDB_VERSION") == torch_dlpack_bridge.__version__  # the version file matches the package


@pytest.mark.parametrize("request_,ok", [("0.1", True), ("0.1.0", True), ("0.1.0...1.0", True), ("0.2", False),
                                         ("1.0", False), ("0.0.5", False)])
def test_version_requests(tmp_path, request_, ok):
    # 0.x: the minor version must match (0.x releases may change the headers' API); never newer than installed.
    res = configure(tmp_path, request_)
    assert (res.returncode == 0) == ok, res.stdout + res.stderr
    if not ok:
        assert "torch_dlpack_bridgeConfigVersion.cmake" in res.stderr or "version" in res.stderr


def test_missing_headers_make_the_package_not_found(tmp_path):
    cmake_dir = tmp_path / "pkg" / "cmake"
    shutil.copytree(torch_dlpack_bridge.get_cmake_dir(), cmake_dir)  # a config whose ../include is absent
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(PROJECT.format(request=""))
    res = subprocess.run([CMAKE, "-S", str(tmp_path / "src"), "-B", str(tmp_path / "build"),
                          f"-Dtorch_dlpack_bridge_DIR={cmake_dir}"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "consumer.h not found" in res.stderr
