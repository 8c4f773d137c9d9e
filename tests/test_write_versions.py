"""Written typed parameters and torch's version counters (issue 44.2; autograd.h): a refused call leaves every
tensor as it was, an accepted one bumps each written tensor's version exactly once, as torch's in-place ops do,
whichever overload took it, however many tried it first, whether or not it requires grad, in std::optional and
std::vector parameters too, and with the GIL released by a call guard.

tests/typed_tensor_module.cpp's bumpsN_ have N overloads, each writing x (x * a) and returning which one ran; a str
for `a` is refused by all of them, after each has tried x.
"""
import sys
import threading

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table and the version bump)
from typed_tensor_build import FLAVOURS

INCOMPATIBLE = r"\(\): incompatible function arguments"
OVERLOADED = ["bumps1_", "bumps2_", "bumps3_"]


@pytest.fixture(params=FLAVOURS)
def m(request, typed_modules):
    return typed_modules[request.param]


class Sub(torch.Tensor):
    """A subclass: its requires_grad is read as an attribute, its version bumped through Python (the fallback)."""


def saved_for_backward(make=lambda w: w):
    """(w, z): w, a leaf (made by `make` from torch.ones(3)), requires grad and z = (w * w).sum() saved it, so any
    bump of w's version makes z.backward() raise."""
    w = make(torch.ones(3)).requires_grad_()
    return w, (w * w).sum()


@pytest.mark.parametrize("name", OVERLOADED)
def test_a_refused_call_leaves_the_tensor_as_it_was(m, name):
    fn = getattr(m, name)
    for make in (lambda t: t, lambda t: t.as_subclass(Sub)):
        w, z = saved_for_backward(make)
        refs = sys.getrefcount(w)
        with torch.no_grad(), pytest.raises(TypeError, match=name + INCOMPATIBLE):
            fn(w, "2.0")
        assert (w._version, sys.getrefcount(w), w.tolist()) == (0, refs, [1.0, 1.0, 1.0])
        z.backward()  # nothing changed: the gradient is that of the values saved
        assert w.grad.tolist() == [2.0, 2.0, 2.0]
    x = torch.ones(3)  # in grad mode, a tensor that does not require grad
    with pytest.raises(TypeError, match=name + INCOMPATIBLE):
        fn(x, "2.0")
    assert x._version == 0


@pytest.mark.parametrize("name", OVERLOADED)
@pytest.mark.parametrize("a", [2.5, 3, np.float32(2.0), True], ids=["float", "int", "np.float32", "bool"])
def test_an_accepted_call_bumps_each_written_tensor_once(m, name, a):
    """Whichever overload takes it (pybind11's second, converting pass for np.float32), after however many tried x."""
    for x in (torch.ones(3), torch.ones(3).as_subclass(Sub), torch.ones(3).as_subclass(torch.nn.Parameter)):
        ran = getattr(m, name)(x, a)
        factor = {"double": float(a), "int": int(a), "bool": 1.0 if a else 0.0}[ran]
        assert x._version == 1 and x.tolist() == [factor] * 3, (type(x), ran)


def test_a_write_under_no_grad_is_seen_by_the_backward_that_saved_the_tensor(m):
    w, z = saved_for_backward()
    with torch.no_grad():
        assert m.bumps3_(w, 2.5) == "double"
    assert w._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


@pytest.mark.parametrize("via", ["detach", "view"])
def test_a_write_through_a_tensor_that_shares_the_counter_is_seen_as_torch_sees_it(m, via):
    """.detach() and views share w's version counter: torch's own w.detach().mul_(5) makes the backward raise, and
    so does the kernel's write (it used to give a silently wrong gradient: [10, 10, 10])."""
    share = (lambda w: w.detach()) if via == "detach" else (lambda w: w.detach()[:])
    errors = []
    for write in (lambda t: t.mul_(5), lambda t: m.bumps1_(t, 5.0)):  # torch's in-place op (the oracle), then ours
        w, z = saved_for_backward()
        write(share(w))
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            z.backward()
        errors.append(str(info.value).split(";")[0].split("[")[0])
    assert errors[0] == errors[1]


def test_optional_and_vector_parameters_bump_when_the_overload_is_chosen(m):
    """pybind11's and nanobind's own casters convert a container's elements while they load it, in every overload
    they try; a container of written tensors is bumped once, when it is converted for the chosen overload."""
    x, y = torch.ones(3), torch.ones(3)
    for call in (lambda: m.bumps_optional_(x, "2.0"), lambda: m.bumps_vector_([x, y], "2.0")):
        with pytest.raises(TypeError, match=INCOMPATIBLE):
            call()
    assert (x._version, y._version) == (0, 0)
    assert m.bumps_vector_([x, y], 2.5) == "double" and (x._version, y._version) == (1, 1)
    assert m.bumps_optional_(x, 2) == "int" and (x._version, y._version) == (2, 1)
    assert m.bumps_optional_(None, 2.5) == "none" and m.bumps_vector_([], 2.5) == "double"
    assert x.tolist() == [5.0] * 3 and y.tolist() == [2.5] * 3


def test_the_bump_needs_no_gil(m):
    """A call guard that releases the GIL converts the arguments without it: the C bump needs none, the Python
    fallback (a subclass) takes it."""
    for x in (torch.ones(3), torch.ones(3).as_subclass(Sub)):
        m.bumps_nogil_(x, 2.0)
        assert x._version == 1 and x.tolist() == [2.0] * 3


def test_a_numpy_array_is_written_without_a_version(m):
    a = np.ones(3, dtype=np.float32)
    assert m.bumps2_(a, 2.0) == "double" and a.tolist() == [2.0] * 3


NOT_TORCH = r"""
import sys
import threading
import numpy as np
sys.path.insert(0, sys.argv[1])
m = __import__(sys.argv[2])

class Flagged(np.ndarray):  # says it requires grad: not torch's autograd to answer
    requires_grad = True

class Raising(np.ndarray):  # cannot say
    @property
    def requires_grad(self):
        raise RuntimeError("no autograd here")

for cls in (Flagged, Raising):
    a = np.ones(3, dtype=np.float32).view(cls)
    assert m.bumps2_(a, 2.0) == "double" and a.tolist() == [2.0] * 3, cls
print(sorted(k for k in sys.modules if k == "torch" or k.startswith("torch.")))
"""


def test_another_frameworks_tensor_is_written_without_torch(m):
    """A written parameter given an object that is no torch.Tensor (a NumPy array whose class has a requires_grad,
    True or raising) asks nothing and never imports torch (autograd.h: is_torch_tensor)."""
    import os
    import subprocess

    res = subprocess.run([sys.executable, "-c", NOT_TORCH, os.path.dirname(m.__file__), m.__name__],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize("torch_threads", [0, 7], ids=["kernel-threads", "beside-torch-add_"])
def test_threads_writing_views_of_one_base_lose_no_bump(m, torch_threads):
    """Issue 51: views of one base share one version counter. Threads writing disjoint rows through a kernel whose
    call guard releases the GIL (the bump runs without it), beside threads running torch's own in-place add_ (which
    releases it too), end with exactly one bump per write: the counter neither loses a bump nor goes back. Before,
    a load and a store lost up to 12,000 of 48,000, and undid torch's own increments."""
    n, rounds = 2000, 4
    for _ in range(rounds):
        base = torch.zeros(8, 16)
        barrier = threading.Barrier(8)

        def kernel(row):
            barrier.wait()
            for _ in range(n):
                m.bumps_nogil_(row, 1.0)

        def torch_op(row):
            barrier.wait()
            for _ in range(n):
                row.add_(0.0)

        threads = [threading.Thread(target=torch_op if i < torch_threads else kernel, args=(base[i],))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert base._version == 8 * n
