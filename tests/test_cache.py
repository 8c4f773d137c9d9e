"""The per-user cache's checks (torch_dlpack_bridge/_cache.py), called directly, in this process: what may be
loaded from a cache folder, and that the file loaded is the file checked. tests/test_loader.py covers the
same rules end to end (a fresh interpreter importing the package); these run in milliseconds and pin each
rule on its own: the library file's own owner and mode, links, the folders' modes, and the descriptor.
"""

import ctypes
import os
import shutil
import subprocess

import pytest

import torch_dlpack_bridge
from torch_dlpack_bridge import _build, _cache, _loader

OTHER_UID = 54321  # another local user: root can give files to it (CI runs as root)
NAME = "libtdb_test.so"


def tiny_library(path, which):
    """A shared library at `path` exporting `int which` = `which` (mode 0755), to tell two files apart."""
    source = f"{path}.c"
    with open(source, "w") as f:
        f.write(f"int which = {which};\n")
    subprocess.run(["cc", "-shared", "-fPIC", source, "-o", path], check=True)
    os.remove(source)
    os.chmod(path, 0o755)
    return path


def which(library):
    """The library's `which`; then unloads it: glibc's dlopen returns an object already loaded under the same
    name, and /proc/self/fd/N names come back with the descriptor numbers."""
    import _ctypes

    value = ctypes.c_int.in_dll(library, "which").value
    _ctypes.dlclose(library._handle)
    return value


@pytest.fixture
def folder(tmp_path):
    """A cache root and folder made by _cache itself (0700), with a library of this user's in it (0755):
    (open descriptor of the folder, the folder's path)."""
    root = str(tmp_path / "cache")
    fd = _cache.open_folder(root, "torch-x", create=True)
    path = os.path.join(root, "torch-x")
    tiny_library(os.path.join(path, NAME), 1)
    yield fd, path
    os.close(fd)


def open_library(folder):
    fd, path = folder
    return _cache.open_file(fd, NAME, os.path.join(path, NAME))


def test_a_library_of_this_user_writable_by_no_one_else_is_accepted(folder):
    for mode in (0o755, 0o700, 0o500):
        os.chmod(os.path.join(folder[1], NAME), mode)
        os.close(open_library(folder))


@pytest.mark.parametrize("mode", [0o775, 0o765, 0o757, 0o756, 0o777, 0o620], ids=oct)
def test_a_library_file_writable_by_group_or_others_is_refused_in_a_trusted_folder(folder, mode):
    """The folders pass every check, but the file itself could be rewritten by someone else: refused."""
    path = os.path.join(folder[1], NAME)
    os.chmod(path, mode)
    with pytest.raises(_cache.Untrusted, match=f"{path} is writable by group or others \\(mode {mode:o}\\)"):
        open_library(folder)


def test_a_library_file_of_another_user_is_refused(folder):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path = os.path.join(folder[1], NAME)
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(_cache.Untrusted, match=f"{path} belongs to uid {OTHER_UID}, not to this user"):
        open_library(folder)


def test_a_library_that_is_a_link_is_refused_even_to_a_good_file(folder, tmp_path):
    fd, path = folder
    target = tiny_library(str(tmp_path / "elsewhere.so"), 2)
    os.remove(os.path.join(path, NAME))
    os.symlink(target, os.path.join(path, NAME))
    with pytest.raises(_cache.Untrusted, match="is a symbolic link"):
        open_library(folder)


def test_the_library_loaded_is_the_file_checked_even_if_the_path_is_swapped_after_the_check(folder, tmp_path):
    """Between the check and dlopen another file is renamed over the path: the file checked is loaded, through
    its descriptor, never the one now at the path."""
    fd, path = folder
    library_path = os.path.join(path, NAME)
    checked = open_library(folder)
    try:
        os.replace(tiny_library(str(tmp_path / "swapped-in.so"), 2), library_path)
        library = _cache.load_descriptor(checked, library_path)
    finally:
        os.close(checked)
    assert which(library) == 1
    assert which(ctypes.CDLL(library_path)) == 2  # the path itself now holds the other file


def test_the_loader_loads_the_cached_library_it_checked(tmp_path, monkeypatch):
    """_loader.open_cached, the caller: a table library passes the checks, then another file takes its name
    before the load; the table library is what is loaded and identified."""
    target = _build.installed_torch()
    root = str(tmp_path / "cache")
    fd = _cache.open_folder(root, "torch-x", create=True)
    path = os.path.join(root, "torch-x", target.library_name)
    shutil.copy(torch_dlpack_bridge.build_info()["library"], path)
    os.chmod(path, 0o755)
    open_file = _cache.open_file

    def swapped_after_the_check(*args):
        checked = open_file(*args)
        os.replace(tiny_library(str(tmp_path / "swapped-in.so"), 2), path)
        return checked

    monkeypatch.setattr(_cache, "open_file", swapped_after_the_check)
    try:
        library, info = _loader.open_cached(fd, target, path)
    finally:
        os.close(fd)
    assert _build.version_tuple(info["torch_version"]) == target.minor and hasattr(library, "tdb_exchange_api")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777], ids=oct)
@pytest.mark.parametrize("which_folder", ["cache root", "cache folder"])
def test_cache_folders_writable_by_group_or_others_are_refused_even_sticky(tmp_path, mode, which_folder):
    """A sticky folder owned by root is accepted above the cache root (/tmp), never as the root or a folder
    in it: this user owns those (root, here), and they must be private."""
    root = str(tmp_path / "cache")
    os.close(_cache.open_folder(root, "torch-x", create=True))
    changed = root if which_folder == "cache root" else os.path.join(root, "torch-x")
    os.chmod(changed, mode)
    with pytest.raises(_cache.Untrusted, match=f"{changed} is writable by group or others"):
        os.close(_cache.open_folder(root, "torch-x", create=False))


def test_cache_folders_are_made_private_whatever_the_umask(tmp_path):
    root = tmp_path / "cache"
    old = os.umask(0)
    try:
        os.close(_cache.open_folder(str(root / "below"), "torch-x", create=True))
    finally:
        os.umask(old)
    for path in (root, root / "below", root / "below" / "torch-x"):
        assert os.stat(path).st_mode & 0o7777 == 0o700, path


def test_the_cache_folder_changes_with_the_sources(monkeypatch):
    """An edited checkout (or another package build) must not load the library built from other sources."""
    target = _build.installed_torch()
    monkeypatch.setattr(_build, "sources_digest", lambda src=None: "aaaaaaaaaaaa")
    before = _loader.cache_dir(target, "0.1.0")
    monkeypatch.setattr(_build, "sources_digest", lambda src=None: "bbbbbbbbbbbb")
    after = _loader.cache_dir(target, "0.1.0")
    assert before != after and after.endswith("bbbbbbbbbbbb")
    assert _loader.cache_dir(target, "0.2.0") != after

