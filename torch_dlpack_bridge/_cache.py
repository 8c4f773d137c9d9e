"""The per-user cache of table libraries built at import, opened so that nothing another local user could
have written is ever loaded, and loaded exactly as checked.

Folders are opened one component at a time from ``/`` (``O_NOFOLLOW``, ``O_DIRECTORY``) and checked on the
open descriptor (``fstat``), as OpenSSH's StrictModes checks a user's files. Accepted:
- a folder above the cache root: owned by root or this user, and writable by no one else, unless it is a
  sticky folder owned by root (``/tmp``: others may add entries there but cannot rename or remove ours);
- a symbolic link above the cache root: owned by root or this user (its target is then walked the same way);
- the cache root and every folder in it: owned by this user and writable by no one else (made 0700); the
  root itself may be a symbolic link that this user owns, no folder or file below it may be one;
- a library: a regular, non-empty file of this user's, writable by no one else, opened without following a
  link and loaded through that descriptor (``/proc/self/fd/N``), so no path can be swapped in between.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


class Untrusted(Exception):
    """A path another local user could have written, so nothing found there may run; the message says why."""


def owner_problem(info: os.stat_result, path: str, owners: Tuple[int, ...]) -> Optional[str]:
    if info.st_uid in owners:
        return None
    who = "this user" if owners == (os.geteuid(),) else "root or this user"
    return f"{path} belongs to uid {info.st_uid}, not to {who} (uid {os.geteuid()})"


def check_folder(fd: int, path: str, own: bool) -> None:
    """Raises Untrusted unless the open folder `fd` (at `path`) passes the rule for its place (`own`: the
    cache root or below)."""
    info = os.fstat(fd)
    owners = (os.geteuid(),) if own else (0, os.geteuid())
    problem = owner_problem(info, path, owners)
    mode = stat.S_IMODE(info.st_mode)
    if problem is None and mode & (stat.S_IWGRP | stat.S_IWOTH):
        if own or not (mode & stat.S_ISVTX and info.st_uid == 0):
            problem = f"{path} is writable by group or others (mode {mode:o})"
    if problem is not None:
        raise Untrusted(problem)


def components(path: str) -> List[str]:
    return [part for part in os.path.normpath(path).split("/") if part]


def open_child(parent: int, name: str, create: bool) -> int:
    """Opens folder `name` in the open folder `parent` without following a link; with `create`, makes it
    (0700) when missing. Raises FileNotFoundError when missing, OSError(ELOOP) for a link."""
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass  # another process made it meanwhile
    return os.open(name, FOLDER_FLAGS, dir_fd=parent)


def open_root(root: str, create: bool) -> int:
    """An open descriptor of the cache root `root` (absolute), walked and checked from ``/`` (see the module's
    docstring); with `create`, missing folders are made (0700). Raises Untrusted, or OSError (missing, no
    permission)."""
    parts, links = components(root), 0
    while True:  # once more from "/" after each symbolic link, with its target in place of the link
        fd, walked = os.open("/", FOLDER_FLAGS), "/"
        try:
            check_folder(fd, walked, own=False)
            for i, name in enumerate(parts):
                last = i == len(parts) - 1
                path = os.path.join(walked, name)
                try:
                    child = open_child(fd, name, create)
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise OSError(error.errno, error.strerror, path) from None  # the whole path, not `name`
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISLNK(info.st_mode):
                        raise Untrusted(f"{path} is not a folder") from None
                    problem = owner_problem(info, path, (os.geteuid(),) if last else (0, os.geteuid()))
                    if problem is not None:
                        raise Untrusted(f"{path} is a symbolic link, and {problem}") from None
                    links += 1
                    if links > MAX_LINKS:
                        raise Untrusted(f"{root}: more than {MAX_LINKS} symbolic links") from None
                    target = os.readlink(name, dir_fd=fd)
                    parts = components(os.path.join(walked, target, *parts[i + 1:]))
                    break
                os.close(fd)
                fd, walked = child, path
                check_folder(fd, walked, own=last)
            else:
                result, fd = fd, -1
                return result
        finally:
            if fd >= 0:
                os.close(fd)


def open_folder(root: str, name: str, create: bool) -> int:
    """An open descriptor of the cache folder `name` in the cache root `root`, both checked."""
    root_fd = open_root(root, create)
    try:
        path = os.path.join(root, name)
        try:
            fd = open_child(root_fd, name, create)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Untrusted(f"{path} is a symbolic link or not a folder") from None
            raise OSError(error.errno, error.strerror, path) from None
    finally:
        os.close(root_fd)
    try:
        check_folder(fd, path, own=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(folder: int, name: str, path: str) -> int:
    """An open descriptor of the library `name` in the open cache folder `folder`, checked. Raises
    FileNotFoundError when there is none, Untrusted, or ValueError for an empty or special file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise Untrusted(f"{path} is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        problem = owner_problem(info, path, (os.geteuid(),))
        if problem is None and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problem = f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
        if problem is not None:
            raise Untrusted(problem)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            raise ValueError(f"{path} is empty or not a file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def load_descriptor(fd: int, path: str) -> ctypes.PyDLL:
    """dlopen of the file open at `fd` itself (its path may have changed since it was checked); PyDLL: calls
    keep the GIL and check for a Python error."""
    by_descriptor = f"/proc/self/fd/{fd}"
    if not os.path.exists(by_descriptor):  # no /proc: the folders checked are writable by this user alone
        by_descriptor = path
    return ctypes.PyDLL(by_descriptor)


def read_record(folder: int, name: str) -> Optional[Dict[str, Any]]:
    """A small JSON record kept in the open cache folder (None when absent or unreadable)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    try:
        with os.fdopen(fd) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(folder: int, name: str, record: Dict[str, Any]) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def remove_record(folder: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass


def create_new(folder: int, name: str, mode: int = 0o600) -> int:
    """Opens (creating) file `name` in the open folder `folder` for writing, never through a link."""
    return os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
