"""Kernels under torch.compile (issue 19): examples/axpy_compile, a torch-free pybind11 kernel binary whose
Python package registers it as torch custom ops (torch.library.custom_op + register_fake; axpy_ declares
mutates_args), built once per session with its own `pip install`.

Pinned here: the binary links nothing of torch; eager results; torch.library.opcheck on both ops; one
function with both ops under torch.compile(fullgraph=True) gives the eager results (the only compiled
function with a real backend: compiling is slow on a busy 2-core machine); the eager wrapper (ops.direct())
calls the kernel directly and falls back to the op for autograd and subclasses; a FakeTensor or meta
tensor handed to the kernel's parameters directly (FakeTensorMode, Dynamo's fake propagation, torch's own table)
is pybind11's TypeError showing the FakeTensor among the arguments (a parameter's refusal: docs/guides/
kernel-authors.md) and, as the module ends with tdb::explain_refusals(m), the reason naming the custom-op route,
where consumer.h raises a BufferError saying the tensor has no data and pointing to the custom-op route
(tests/test_consumer_header.py); benchmarks/dispatch.py runs.
"""
import os
import re
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import python_env, torch_at_least
from example_packages import REPO, import_from, pip_install, shared_objects

# Inductor imports torch.utils.mkldnn, whose classes use torch's own deprecated torch.jit.script_method when the
# module is imported (14 DeprecationWarnings, once per process, from the first compile here): torch's code, not
# this project's, so filtered here by its message (issue 46.8).
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

# What pybind11 says for a parameter that does not take the argument: the arguments' reprs show the FakeTensor.
FAKE_REFUSED = r"incompatible function arguments(.|\n)*Invoked with: .*FakeTensor"
# What the module's tdb::explain_refusals(m) adds to it: the custom-op route (tdb's table; torch's own words differ).
NO_DATA = (r"\n\nWhy the tensor arguments were refused:\n    overload 1: argument 'x': torch_dlpack_bridge: cannot "
           r"export a meta tensor or FakeTensor: it has no data \(.*custom op with a fake implementation, "
           r"torch.library.custom_op and register_fake\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return pip_install("axpy_compile", tmp_path_factory.mktemp("axpy_compile"))


@pytest.fixture(scope="module")
def ac(site):
    return import_from(site, "axpy_compile")


def test_kernel_binary_links_nothing_of_torch(site, ac):
    (so,) = shared_objects(os.path.join(site, "axpy_compile"), "_kernels")
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" in needed and not any(lib in needed for lib in ("libtorch", "libc10", "libshm"))
    undefined = subprocess.run(["nm", "-D", "--undefined-only", "-C", so], capture_output=True, text=True,
                               check=True).stdout
    assert not [s for s in undefined.splitlines() if "c10::" in s or "at::" in s or "torch::" in s]


# ----------------------------------------------------------------------------- eager


@pytest.mark.parametrize("route", ["wrapper", "op"])
def test_eager_results_match_torch(ac, route):
    axpy_, scaled_copy = (ac.axpy_, ac.scaled_copy) if route == "wrapper" else (ac.axpy_op, ac.scaled_copy_op)
    x, y = torch.randn(12)[::2], torch.randn(6)
    expected = y + 1.5 * x
    assert axpy_(1.5, x, y) is None
    torch.testing.assert_close(y, expected)
    x2 = torch.randn(3, 4).t()
    out = scaled_copy(-2.0, x2)
    assert type(out) is torch.Tensor and out.is_contiguous()
    torch.testing.assert_close(out, -2.0 * x2)


def test_direct_calls_skip_the_dispatcher_unless_needed(ac):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = torch.ones(3), torch.zeros(3)
    assert ac.direct(x, y) and not ac.direct(x, torch.nn.Parameter(y)) and not ac.direct(x.requires_grad_())
    x.requires_grad_(False)
    with Log() as log:
        ac.axpy_(1.0, x, y)  # plain tensors, eager: the kernel itself, which no dispatch mode sees
    assert log.ops == [] and y.tolist() == [1.0, 1.0, 1.0]
    with Log() as log:
        ac.axpy_op(1.0, x, y)
    assert log.ops == ["axpy_compile.axpy_.default"]


def test_autograd_goes_through_the_op(ac):
    x = torch.randn(5, requires_grad=True)
    out = ac.scaled_copy(3.0, x)  # requires_grad: the wrapper takes the op, which records the backward
    assert out.grad_fn is not None
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 3.0))
    with torch.no_grad():
        assert ac.scaled_copy(3.0, x).grad_fn is None


# ----------------------------------------------------------------------------- opcheck and torch.compile


@pytest.mark.parametrize("case", ["axpy_", "axpy_strided_x", "scaled_copy", "scaled_copy_grad"])
def test_opcheck_passes(ac, case):
    op, args = {
        "axpy_": (ac.axpy_op, (2.0, torch.randn(5), torch.randn(5))),
        "axpy_strided_x": (ac.axpy_op, (-1.0, torch.randn(10)[::2], torch.randn(5))),
        "scaled_copy": (ac.scaled_copy_op, (1.5, torch.randn(3, 4).t())),
        "scaled_copy_grad": (ac.scaled_copy_op, (0.5, torch.randn(7, requires_grad=True))),
    }[case]
    result = torch.library.opcheck(op, args)
    assert result and set(result.values()) == {"SUCCESS"}, result


def test_library_define_impl_route_passes_opcheck(ac):
    # The lower-level route of benchmarks/dispatch.py: a hand-written schema, a CPU impl and a fake impl.
    from axpy_compile import _kernels

    lib = torch.library.Library("tdb_test_compile", "DEF")
    lib.define("axpy_(float a, Tensor x, Tensor(a!) y) -> ()")
    lib.impl("axpy_", lambda a, x, y: _kernels.axpy_(a, x, y), "CPU")
    torch.library.register_fake("tdb_test_compile::axpy_", lambda a, x, y: None, lib=lib)
    try:
        op = torch.ops.tdb_test_compile.axpy_.default
        result = torch.library.opcheck(op, (2.0, torch.randn(5), torch.randn(5)))
        assert set(result.values()) == {"SUCCESS"}, result
    finally:
        lib._destroy()


def test_fullgraph_compile_matches_eager(ac):
    def step(a, x, y):
        ac.axpy_(a, x, y)  # in place: functionalized in the graph, written back to y
        return ac.scaled_copy(2.0, y) + x

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)  # fullgraph: any graph break is an error
    x = torch.randn(8)
    y_eager = torch.randn(8)
    y_compiled = y_eager.clone()
    expected = step(0.5, x, y_eager)
    got = compiled(0.5, x, y_compiled)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(y_compiled, y_eager)  # the mutation happened under compile too
    got2 = compiled(0.5, x, y_compiled)  # the compiled graph again, no recompilation needed
    torch.testing.assert_close(got2, step(0.5, x, y_eager))


# ----------------------------------------------------------------------------- fake and meta tensors, directly


def test_fake_tensor_mode_direct_call_says_no_data(ac):
    from axpy_compile import _kernels

    with FakeTensorMode():
        x, y = torch.ones(3), torch.ones(3)
        # Each tensor argument is explained, also y, which the library did not reach once x was refused.
        with pytest.raises(TypeError, match=FAKE_REFUSED + ".*" + NO_DATA + NO_DATA.split("refused:")[1]
                           .replace("argument 'x'", "argument 'y'") + "$"):
            _kernels.axpy_(1.0, x, y)
        with pytest.raises(TypeError, match=FAKE_REFUSED + ".*" + NO_DATA + "$"):
            _kernels.scaled_copy(1.0, x)
        out = ac.scaled_copy(1.0, x)  # the wrapper takes the op: its fake implementation answers
        assert isinstance(out, torch._subclasses.fake_tensor.FakeTensor) and out.shape == (3,)


def test_meta_tensor_direct_call_is_refused(ac):
    from axpy_compile import _kernels

    meta = r"incompatible function arguments(.|\n)*Invoked with: .*device='meta'.*"
    with pytest.raises(TypeError, match=meta + NO_DATA + "$"):
        _kernels.scaled_copy(1.0, torch.ones(3, device="meta"))


def test_kernel_called_directly_under_compile(ac):
    from axpy_compile import _kernels

    def f(x):
        return _kernels.scaled_copy(2.0, x) + 1

    # Dynamo cannot trace into a C function: with fullgraph=True that is its own error (torch 2.13's names
    # custom operators and allow_in_graph as the ways out); without fullgraph, a graph break.
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(f, fullgraph=True, backend="eager")(torch.ones(3))
    # Put in the graph as it is (allow_in_graph), the kernel meets FakeTensors while Dynamo traces: refused.
    torch._dynamo.reset()
    allowed = torch.compiler.allow_in_graph(_kernels.scaled_copy)
    try:
        with pytest.raises(Exception, match=FAKE_REFUSED):
            torch.compile(lambda x: allowed(2.0, x) + 1, fullgraph=True, backend="eager")(torch.ones(3))
    finally:
        torch._dynamo.reset()
        torch._dynamo.disallow_in_graph(_kernels.scaled_copy)


def test_fake_tensor_through_torchs_own_table_is_refused(site):
    # torch's table (torch >= 2.10) exports a FakeTensor with data = NULL (and a deprecation warning);
    # consumer.h refuses a DLTensor with elements and no data, whichever producer made it: the parameter does not
    # take it (pybind11's TypeError).
    code = f"""
import sys, torch, warnings
import torch_dlpack_bridge
from torch._subclasses.fake_tensor import FakeTensorMode
print(torch_dlpack_bridge.active_provider()["__dlpack_c_exchange_api__"])
sys.path.insert(0, {site!r})
from axpy_compile import _kernels
x = FakeTensorMode().from_tensor(torch.ones(3))
for fn in (lambda: _kernels.scaled_copy(1.0, x), lambda: _kernels.axpy_(1.0, x, torch.ones(3))):
    try:
        fn()
    except TypeError as e:
        print("TypeError:", str(e).replace(chr(10), " "))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=python_env(TORCH_DLPACK_BRIDGE_PREFER="torch"), cwd=REPO)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == ("torch" if torch_at_least(2, 10) else "torch_dlpack_bridge")
    assert len(lines) == 3 and all(ln.startswith("TypeError: ") for ln in lines[1:]), res.stdout
    assert all(re.search(FAKE_REFUSED, ln) for ln in lines[1:]), res.stdout


# ----------------------------------------------------------------------------- the dispatch benchmark


def test_dispatch_benchmark_runs(site):
    res = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "dispatch.py"), "--site", site,
                          "--rounds", "1", "--number", "200"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("| ") and "ns per call" not in ln]
    assert len(rows) == 9 and rows[0].startswith("| kernel called directly | ") and "| 1.0x |" in rows[0]
