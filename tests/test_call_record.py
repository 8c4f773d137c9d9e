"""A call's state ends with its call (issue 51; call.h): what a wrapped call keeps (exports lent between overloads
and passes, producers' refusals, an exception that was not a refusal) is its own record's, never lent to a call made
from its body or from a producer, never found by a later call, and an interrupt raised by a producer ends the call
however the binding library resolves it. Both binding libraries (tests/refusals_module.cpp, built once per flavour).
"""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from test_item_lifetimes import Building, made
from test_refusals import refusal_modules  # noqa: F401  (the fixture)
from typed_tensor_build import FLAVOURS


@pytest.fixture(params=FLAVOURS)
def m(request, refusal_modules):  # noqa: F811
    return refusal_modules[request.param]


class Counting:
    """A producer without a table whose k-th `__dlpack__` hands out [k, k, k] (float32)."""

    def __init__(self):
        self.k = 0

    def __dlpack__(self, **kwargs):
        self.k += 1
        return np.full(3, self.k, dtype=np.float32).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class Raising:
    """A producer without a table whose `__dlpack__` raises `exc` (the same object), counting how often it was asked."""

    def __init__(self, exc):
        self.exc, self.calls = exc, 0

    def __dlpack__(self, **kwargs):
        self.calls += 1
        raise self.exc

    def __dlpack_device__(self):
        return (1, 0)


def run_threads(worker, n=8):
    """Runs worker(i) on n threads at once; the exceptions they raised (a worker reports its own failures by raising)."""
    errors = []

    def guarded(i):
        try:
            worker(i)
        except BaseException as e:  # noqa: BLE001  (returned)
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_a_call_from_a_body_is_lent_nothing_of_its_callers_record(m):
    # late_sum is defined after explain_refusals (not wrapped); apply's body calls it three times. Each call asks the
    # producer itself: [1,1,1], [2,2,2], [3,3,3]. Before, the first export was kept in apply's call and lent to the
    # later ones: 3, 3, 3.
    p, seen = Counting(), []
    assert m.apply(lambda: seen.extend(m.late_sum(p) for _ in range(3)), torch.ones(2, 4)) == "float32[2]"
    assert seen == [3.0, 6.0, 9.0]
    assert [m.late_sum(p) for _ in range(2)] == [12.0, 15.0]  # outside any call: the same


class FirstRefused:
    """A producer without a table whose first `__dlpack__` hands out float64 rows of 4 (refused by either's float32
    overload) and its k-th after that [k, k, k] (float32)."""

    def __init__(self):
        self.k = 0

    def __dlpack__(self, **kwargs):
        self.k += 1
        first = self.k == 1
        return np.full((1, 4) if first else 3, self.k, dtype=np.float64 if first else np.float32).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


def test_the_body_of_an_overload_without_a_tdb_parameter_is_lent_nothing(m):
    # either's first overload exported p (float64, refused), kept in the call's record for the overloads after it;
    # the second (two objects) takes the call and its callback calls late_sum(p) (not wrapped). Each asks p itself:
    # 6, 9, 12. Before, late_sum was lent the refused float64 export and raised TypeError.
    p, seen = FirstRefused(), []
    assert m.either(p, lambda: seen.extend(m.late_sum(p) for _ in range(3))) == "object"
    assert seen == [6.0, 9.0, 12.0] and p.k == 4


def test_the_body_of_an_overload_whose_variant_took_no_tensor_is_lent_nothing(m):
    # vary's first overload exports p (float64, refused); the second takes 5 as the int of its std::variant and its
    # callback calls late_sum(p) (not wrapped). Each should ask p itself: 6, 9, 12.
    p, seen = FirstRefused(), []
    assert m.vary(p, 5, lambda: seen.extend(m.late_sum(p) for _ in range(3))) == "variant"
    assert seen == [6.0, 9.0, 12.0] and p.k == 4


def test_the_body_of_an_overload_whose_optional_view_took_none_is_lent_nothing(m):
    # maybe's first overload exports p (float64, refused); the second takes None as its std::optional<TensorView>.
    # nanobind's optional is tdb's own caster, which closes the record; pybind11's is pybind11's.
    p, seen = FirstRefused(), []
    assert m.maybe(p, None, lambda: seen.extend(m.late_sum(p) for _ in range(3))) == "optional"
    assert seen == [6.0, 9.0, 12.0] and p.k == 4


def test_an_overload_without_a_tdb_parameter_given_up_leaves_the_record_to_the_next(m):
    # int_or_vec's first overload (an int) gives p up; the second exports p (float64 rows, refused) into the call's
    # record, and the TypeError's reason is worded from that export: p is asked once.
    p = FirstRefused()
    with pytest.raises(TypeError) as info:
        m.int_or_vec(p)
    assert p.k == 1 and "overload 2: argument 'x': expected dtype float32, got float64" in str(info.value)


def test_a_call_from_a_producer_is_lent_nothing_of_the_call_that_asked_it(m):
    # A producer's __dlpack__ runs while the wrapped call converts its argument: calls it makes (wrapped or not) keep
    # nothing in that call's record and are lent nothing from it.
    q, seen = Counting(), []

    class Asking(Counting):
        def __dlpack__(self, **kwargs):
            seen.extend([m.late_sum(q), m.late_sum(q), m.read_sum(q)])
            return super().__dlpack__(**kwargs)

    assert m.read_sum(Asking()) == 3.0
    assert seen == [3.0, 6.0, 9.0]



def test_a_refused_call_from_a_producer_keeps_nothing_in_the_call_that_asked_it(m):
    # The producer's late_sum(q) is refused (q's first export is float64): its export must not stay in read_sum's
    # record, or the next late_sum(q) would be lent it and refused again instead of asking q (float32 now).
    class Flipping(Counting):
        def __dlpack__(self, **kwargs):
            self.k += 1
            return np.full(3, self.k, dtype=np.float64 if self.k == 1 else np.float32).__dlpack__(**kwargs)

    q, seen = Flipping(), []

    class Asking(Counting):
        def __dlpack__(self, **kwargs):
            with pytest.raises(TypeError, match="incompatible function arguments"):
                m.late_sum(q)
            seen.append(m.late_sum(q))
            return super().__dlpack__(**kwargs)

    assert m.read_sum(Asking()) == 3.0
    assert seen == [6.0]

@pytest.mark.parametrize("name", ["KeyboardInterrupt", "SystemExit", "ValueError"])
def test_an_interrupt_ends_the_call_when_the_overload_is_given_up_for_another_argument(m, name):
    # two(x, y) takes two float32 (-1, 4) tensors; y (float64) is refused after x's producer raised. Before (nanobind),
    # the call raised the library's TypeError and the interrupt was lost.
    exc = {"KeyboardInterrupt": KeyboardInterrupt(), "SystemExit": SystemExit(3),
           "ValueError": ValueError("device lost")}[name]
    p = Raising(exc)
    with pytest.raises(BaseException) as info:
        m.two(p, torch.ones(2, 4, dtype=torch.float64))
    assert info.value is exc
    assert p.calls == 1  # the second pass did not ask it again


def test_an_interrupt_ends_the_call_when_another_overload_takes_the_arguments(m):
    # vec_or_objects: (Vec, int) then (object, object). x's producer raises in the first; "two" is not an int, so the
    # second overload takes the call. Before (nanobind), it returned -1 and the interrupt was lost.
    exc = KeyboardInterrupt()
    p = Raising(exc)
    with pytest.raises(KeyboardInterrupt) as info:
        m.vec_or_objects(p, "two")
    assert info.value is exc and p.calls == 1


def test_an_interrupt_is_not_raised_by_a_later_call(m):
    # Before (nanobind), the interrupt kept from two(P, float64) was raised by the next call given P, unasked.
    p = Raising(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        m.two(p, torch.ones(2, 4, dtype=torch.float64))
    p.exc = ValueError("device lost")
    with pytest.raises(ValueError, match="device lost"):
        m.two(p, torch.ones(2, 4))
    assert p.calls == 2
    good = Counting()
    good.__dlpack__ = lambda **kw: torch.ones(2, 4).__dlpack__(**kw)
    assert m.two(good, torch.ones(2, 4)) == "float32[2]float32[2]"
    assert m.late_sum(torch.ones(3)) == 3.0


@pytest.mark.parametrize("form", ["c_plain", "c_vector", "c_optional", "variant"])
def test_an_interrupt_inside_a_container_ends_the_call(m, form):
    exc = KeyboardInterrupt()
    p = Raising(exc)
    f = getattr(m, form)
    with pytest.raises(KeyboardInterrupt) as info:
        f([torch.ones(2, 4), p] if form == "c_vector" else p, 2)
    assert info.value is exc


def test_threads_keep_their_records_apart(m):
    # Refused and accepted calls, producers without a table and interrupts from 8 threads at once: each call gets its
    # own reasons, its own exports and its own exception.
    barrier = threading.Barrier(8, timeout=120)  # a thread that fails first breaks it, not the run

    def worker(i):
        barrier.wait()
        for _ in range(200):
            c = Counting()
            assert m.read_sum(c) == 3.0 and m.read_sum(c) == 6.0
            with pytest.raises(TypeError, match="argument 'x': expected dtype float32, got float64"):
                m.c_plain(torch.ones(2, 4, dtype=torch.float64), 1.0)
            exc = KeyboardInterrupt(i)
            with pytest.raises(KeyboardInterrupt) as info:
                m.two(Raising(exc), torch.ones(2, 4, dtype=torch.float64))
            assert info.value is exc

    errors = run_threads(worker)
    assert not errors, errors[:3]


def test_threads_making_the_first_calls_of_new_types_at_once(m):
    # Each round makes new producer types (a class with only __dlpack__, a torch.Tensor subclass) that 8 threads then
    # give to the module at the same moment: the first lookups of each type's table race, and every call still reads
    # its own tensor.
    for _ in range(20):
        dlpack_only = type("DLPackOnly", (Counting,), {})
        subclass = type("Sub", (torch.Tensor,), {})
        barrier = threading.Barrier(8, timeout=120)  # a thread that fails first breaks it, not the run

        def worker(i):
            x = dlpack_only() if i % 2 else torch.full((3,), float(i)).as_subclass(subclass)
            barrier.wait()
            assert m.read_sum(x) == (3.0 if i % 2 else 3.0 * i)

        errors = run_threads(worker)
        assert not errors, errors[:3]


def test_a_property_setter_is_wrapped_and_lent_nothing_of_its_callers_record(m):
    # A property's setter with a tensor parameter is wrapped as a method is: a refused value gets its reason, and a
    # setter called from the body of an overload without a tdb parameter opens its own record. Before, it was not
    # wrapped: no reason, and (nanobind) it was lent either's refused float64 export of p.
    h = m.Holder()
    with pytest.raises(TypeError, match="expected dtype float32, got float64"):
        h.w = torch.ones(3, dtype=torch.float64)
    p, seen = FirstRefused(), []

    def callback():
        for _ in range(3):
            h.w = p
            seen.append(h.w)

    assert m.either(p, callback) == "object"
    assert seen == [6.0, 9.0, 12.0] and p.k == 4


# ---- Issue 59: a call's state is found through the call (the Python frame that made it), not the thread ----------


def building(n, hook):
    """A sequence of n items made as they are asked for ([k, k, k], k = 1 .. n), running `hook` before each."""
    return Building(n, lambda k: (hook(), made(k))[1])


def test_code_run_while_a_call_converts_its_list_is_lent_nothing(m):
    # The list's __getitem__ runs while total(xs) converts it, and calls late_sum(r) and cast_sum(r) (not wrapped):
    # each asks r itself. Before, the first export was kept in total's record and lent to the rest: 3, 3, 3, 3.
    r, seen = Counting(), []
    assert m.total(building(2, lambda: seen.extend([m.late_sum(r), m.cast_sum(r)]))) == 9.0
    assert seen == [3.0, 6.0, 9.0, 12.0] and r.k == 4


def test_code_run_while_a_call_converts_a_scalar_is_lent_nothing(m):
    # a's __float__ (c_plain's float) and n's __index__ (vec_or_objects' int) run while the call converts them.
    r, seen = Counting(), []

    class Scalar:
        def __float__(self):
            seen.extend([m.late_sum(r), m.cast_sum(r)])
            return 2.0

        def __index__(self):
            seen.extend([m.late_sum(r), m.cast_sum(r)])
            return 2

        __int__ = __index__

    assert m.c_plain(torch.ones(2, 4), Scalar()) == "float32[2]"
    # pybind11's int calls __index__ and takes it (3); nanobind's int does not take the object, the second overload
    # takes the call (-1)
    assert m.vec_or_objects(torch.ones(3), Scalar()) == (3 if m.__name__.endswith("pybind11") else -1)
    assert len(seen) >= 2 and seen == [3.0 * k for k in range(1, len(seen) + 1)]


@pytest.mark.parametrize("hook", ["settrace", "setprofile"])
def test_a_trace_or_profile_function_run_during_a_call_is_lent_nothing(m, hook):
    r, seen = Counting(), []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__getitem__":
            seen.extend([m.late_sum(r), m.cast_sum(r)])
        return None

    install = getattr(sys, hook)
    install(tracer)
    try:
        total = m.total(building(2, lambda: None))
    finally:
        install(None)
    # __getitem__ is called once more, for the IndexError that ends the iteration: each call asks r itself.
    assert total == 9.0 and len(seen) >= 4 and seen == [3.0 * k for k in range(1, len(seen) + 1)]


def test_a_producer_is_asked_once_per_call_whatever_container_took_its_tensor(m):
    # The first overload converts the tensor (a std::variant's alternative; a std::vector of tdb::TensorView) and is
    # given up for its int; the second takes the call, lent the same export. Before, the variant's and pybind11's
    # vector's conversion closed the record: asked twice, and the body read [2, 2, 2].
    p, q = Counting(), Counting()
    assert m.vary_once(p, "s") == 3.0 and p.k == 1
    assert m.views_once([q], "s") == 3.0 and q.k == 1


# What both child scripts start with: the module under test (argv 1: its folder, argv 2: its name) and the producers.
CHILD = r"""
import importlib, sys, threading
import numpy as np, torch, greenlet
import torch_dlpack_bridge
sys.path.insert(0, sys.argv[1])
m = importlib.import_module(sys.argv[2])


class Counting:
    def __init__(self):
        self.k = 0

    def __dlpack__(self, **kwargs):
        self.k += 1
        first = isinstance(self, FirstRefused) and self.k == 1
        return np.full((1, 4) if first else 3, self.k, dtype=np.float64 if first else np.float32).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class FirstRefused(Counting):
    pass
"""

GREENLETS = CHILD + r"""
n, order = int(sys.argv[3]), sys.argv[4]
hub = greenlet.getcurrent()
results, after, ended = {}, [], []


def request(i):
    # either's first overload keeps p's refused float64 export in the call's record; the second's body waits for "I/O"
    # (the hub), then calls a wrapped function with a fresh producer.
    def wait():
        hub.switch()
        after.append(m.read_sum(Counting()))
    results[i] = m.either(FirstRefused(), wait)
    ended.append(m.late_sum(Counting()))  # from the frame whose call just ended: its record must be gone


requests = [greenlet.greenlet(lambda i=i: request(i)) for i in range(n)]
for g in requests:
    g.switch()  # each waits inside the body of its call
q, seen = Counting(), []
for _ in range(2):  # meanwhile the hub calls functions that are not wrapped, and a wrapped one
    seen += [m.late_sum(q), m.cast_sum(q)]
assert m.read_sum(Counting()) == 3.0
for g in (requests if order == "started" else requests[::-1]):
    g.switch()
seen.append(m.late_sum(q))
print(seen, list(results.values()) == ["object"] * n, after == ended == [3.0] * n, all(g.dead for g in requests))
"""


@pytest.mark.parametrize("n", [2, 50])
@pytest.mark.parametrize("order", ["started", "reversed"])
def test_greenlets_switching_inside_bodies_keep_their_calls_apart(m, order, n, tmp_path):
    # A gevent-style hub: n requests each wait inside the body of a wrapped call; the hub meanwhile calls late_sum and
    # cast_sum (not wrapped) and a wrapped function, then the requests end, in the order they started or the reverse.
    # Before: SIGSEGV (the thread's innermost record was on a C stack that greenlet had copied away).
    script = tmp_path / "greenlets.py"
    script.write_text(GREENLETS)
    run = subprocess.run([sys.executable, str(script), os.path.dirname(m.__file__), m.__name__, str(n), order],
                         capture_output=True, text=True, timeout=300)
    if m.__name__.endswith("pybind11") and order == "started":
        # Not LIFO: pybind11's own thread-local stack of temporaries is left pointing at the waiting call's, and its
        # next call aborts ("loader_life_support: internal error") or crashes (docs/limitations.md).
        assert run.returncode != 0 and "[3.0, 6.0" not in run.stdout, (run.stdout, run.stderr[-3000:])
        return
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[3.0, 6.0, 9.0, 12.0, 15.0] True True True", run.stdout


THREADS = CHILD + r"""
inside = [threading.Event(), threading.Event()]
leave = [threading.Event(), threading.Event()]
out = {}


def call(i):
    return m.either(FirstRefused(), lambda: (inside[i].set(), leave[i].wait(60)))


def use():  # called at the depth call() was: the same frame address
    return m.late_sum(Counting())


def worker(i):
    out[i] = (call(i), use(), use())


threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
threads[0].start()
inside[0].wait(60)
threads[1].start()
inside[1].wait(60)
leave[0].set()  # the first call to start ends first
threads[0].join(60)
leave[1].set()
threads[1].join(60)
print(out[0], out[1])
"""


def test_calls_on_threads_that_end_out_of_order_leave_no_record_behind(m, tmp_path):
    # Two threads wait inside the bodies of wrapped calls (the GIL released); the first to start ends first, then calls
    # late_sum (not wrapped) from a frame at the same address as its call's. A record left listed would be found there,
    # on a stack its call has left.
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    run = subprocess.run([sys.executable, str(script), os.path.dirname(m.__file__), m.__name__], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "('object', 3.0, 3.0) ('object', 3.0, 3.0)", run.stdout
