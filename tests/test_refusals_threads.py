"""Opt-in (TDB_FREE_THREADED=1; run on a free-threaded CPython, docs/development.md "Free-threaded check"): notes
belong to their call when many threads call one wrapped function at once with the GIL off (issue 44.1).

Eight threads start together on tests/refusals_module.cpp's c_dtypes_* (float32/float64 overloads of a written
parameter, every calling form), in both flavours, 3,200 calls each: half refused, each thread with a dtype of its
own, so a reason line naming another thread's dtype is a note that went to the wrong call; half accepted with
tensors of their own sizes. A refused call's lines are exactly its own and its tensors keep their version; an
accepted call returns what its own tensors are and bumps each written one once. Run with PYTHON_GIL=0: torch's
FakeTensor (tests/test_refusals.py) imports triton, whose module turns the GIL back on. The test modules themselves
declare that they run without it (tests/binding_flavour.h, tests/typed_tensor_build.py): a fresh interpreter
without PYTHON_GIL imports both and keeps it off.
"""
import os
import subprocess
import sys
import threading

import pytest
import torch

from conftest import python_env
from test_refusals import reasons, refusal_modules  # noqa: F401  (the fixture: both modules, built once)
from typed_tensor_build import FLAVOURS

pytestmark = pytest.mark.skipif(os.environ.get("TDB_FREE_THREADED") != "1",
                                reason="opt-in: TDB_FREE_THREADED=1 on a free-threaded CPython (3.13t, 3.14t)")

THREADS = 8
CALLS = 400  # per thread
REFUSED = [torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]
FORMS = ["plain", "keyword", "optional", "vector"]


def name(dtype):
    return str(dtype).replace("torch.", "")


def call(m, form, x, first):
    """c_dtypes_<form> on x; the vector form's list is [first, x]."""
    if form == "plain":
        return m.c_dtypes_plain(x, 2.0)
    if form == "keyword":
        return m.c_dtypes_keyword(a=2.0, x=x)
    if form == "optional":
        return m.c_dtypes_optional(x, 2.0)
    return m.c_dtypes_vector([first, x], 2.0)


def refused_lines(form, dtype):
    if form == "vector":  # [float32, x]: the float32 overload refuses x, the float64 one the first item
        return [f"    overload 1: argument 'xs', item 1: expected dtype float32, got {name(dtype)}",
                "    overload 2: argument 'xs', item 0: expected dtype float64, got float32"]
    return [f"    overload 1: argument 'x': expected dtype float32, got {name(dtype)}",
            f"    overload 2: argument 'x': expected dtype float64, got {name(dtype)}"]


def refuse(m, k, i):
    """One refused call of thread k; None, or what went wrong."""
    dtype, form = REFUSED[k], FORMS[(i + k) % 4]
    x, first = torch.ones(i % 5 + 1, 4, dtype=dtype), torch.ones(2, 4)
    try:
        result = call(m, form, x, first)
    except TypeError as e:
        lines = reasons(str(e))
        if lines != refused_lines(form, dtype) or x._version or first._version:
            return f"refused {form} {name(dtype)}: versions {x._version}, {first._version}; lines {lines}\n{e}"
        return None
    return f"refused {form} {name(dtype)}: accepted, returned {result!r}"


def accept(m, k, i):
    """One accepted call of thread k; None, or what went wrong."""
    dtype, form = (torch.float32, torch.float64)[(i + k) % 2], FORMS[(i + k) % 4]
    rows = (7 * i + k) % 9 + 1
    x, first = torch.ones(rows, 4, dtype=dtype), torch.ones(2, 4, dtype=dtype)
    expected = (f"{name(dtype)}[2]," if form == "vector" else "") + f"{name(dtype)}[{rows}]"
    try:
        result = call(m, form, x, first)
    except TypeError as e:
        return f"accepted {form} {name(dtype)}[{rows}]: refused\n{e}"
    if result != expected or x._version != 1 or first._version != (form == "vector"):
        return f"accepted {form} {name(dtype)}[{rows}]: returned {result!r}, versions {x._version}, {first._version}"
    return None


def test_importing_the_test_modules_keeps_the_gil_off(refusal_modules):  # noqa: F811
    env = python_env()
    env.pop("PYTHON_GIL", None)
    code = ("import sys, torch, torch_dlpack_bridge\n"
            f"sys.path[:0] = {[os.path.dirname(m.__file__) for m in refusal_modules.values()]!r}\n"
            "import tdb_refusals_pybind11, tdb_refusals_nanobind\n"
            "assert not sys._is_gil_enabled(), 'the GIL came back'")
    result = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_threads_keep_their_notes_apart_without_the_gil(refusal_modules, flavour):  # noqa: F811
    m = refusal_modules[flavour]
    assert not sys._is_gil_enabled(), "the GIL is on: a free-threaded CPython with PYTHON_GIL=0 is needed"
    start = threading.Barrier(THREADS)
    failures, done = [], []

    def work(k):
        start.wait()
        one = refuse if k % 2 == 0 else accept
        for i in range(CALLS):
            failure = one(m, k // 2, i)
            if failure:
                failures.append(failure)
                return
        done.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"{len(failures)} thread(s) failed; the first: {failures[0]}"
    assert sorted(done) == list(range(THREADS))
    assert not sys._is_gil_enabled()
