"""An exception that is not a refusal, raised by a producer while a tdb parameter takes its tensor, ends the call as it
is (issue 45.5): a KeyboardInterrupt (Ctrl-C during `__dlpack__`), MemoryError, SystemExit or a producer's own
exception class reaches the caller as the same object, its type and attributes kept, through typed parameters,
tdb::TensorView and tdb::ManagedTensor, plain, in a std::optional or std::vector, by keyword, in both binding
libraries and in a function written against CPython. Only a TypeError or BufferError from the producer (and a
parameter's own refusal) is a refusal: the next overload, then the library's TypeError.

The module is tests/typed_tensor_module.cpp (the `typed_modules` fixture, built once per session).
"""
import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from typed_tensor_build import FLAVOURS


class ProducerError(Exception):
    """A producer's own exception class, with state of its own and a constructor that is not (message,)."""

    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code


def interrupt():
    e = KeyboardInterrupt()
    e.where = "__dlpack__"  # an attribute a copy would lose
    return e


# name -> a new exception instance to raise
RAISED = {"KeyboardInterrupt": interrupt, "MemoryError": MemoryError, "SystemExit": lambda: SystemExit(3),
          "ProducerError": lambda: ProducerError(7, "device lost"),
          "BufferError subclass": lambda: type("ExportError", (BufferError,), {})("kept as it is")}


class Raising:
    """A producer without a table whose `__dlpack__` raises `exc` (the same object each time)."""

    def __init__(self, exc):
        self.exc, self.calls = exc, 0

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        self.calls += 1
        raise self.exc


@pytest.fixture(params=FLAVOURS)
def m(request, typed_modules):
    return typed_modules[request.param]


def call(m, prefix, form, x):
    """`<prefix>_<form>` called the way the form is used (the list's bad item is its second)."""
    f = getattr(m, f"{prefix}_{form}")
    if form == "vector":
        return f([torch.ones(3), x], np.float32(2.0))
    if form == "keyword":
        return f(a=np.float32(2.0), x=x)
    if form == "none_default":
        return f(np.float32(2.0), x=x)
    return f(x, np.float32(2.0))


@pytest.mark.parametrize("name", ["KeyboardInterrupt", "MemoryError", "SystemExit", "ProducerError"])
@pytest.mark.parametrize("form", ["plain", "optional", "vector", "keyword", "none_default"])
@pytest.mark.parametrize("prefix", ["typed", "view", "managed", "dtypes"])
def test_an_exception_that_is_not_a_refusal_ends_the_call_as_it_is(m, prefix, form, name):
    exc = RAISED[name]()
    producer = Raising(exc)
    with pytest.raises(BaseException) as info:
        call(m, prefix, form, producer)
    assert info.value is exc, f"{type(info.value).__name__}: {info.value}"
    assert producer.calls == 1  # no other overload, no second pass, asked it again
    assert info.value.__cause__ is None


def test_what_is_kept(m):
    with pytest.raises(KeyboardInterrupt) as info:
        m.typed_plain(Raising(interrupt()), np.float32(2.0))
    assert info.value.where == "__dlpack__" and info.value.args == ()
    with pytest.raises(SystemExit) as info:
        m.view_plain(Raising(SystemExit(3)), np.float32(2.0))
    assert info.value.code == 3
    with pytest.raises(ProducerError) as info:
        m.managed_vector([Raising(ProducerError(7, "device lost"))], np.float32(2.0))
    assert info.value.code == 7 and info.value.args == (7, "device lost")


@pytest.mark.parametrize("exc", [TypeError("no"), BufferError("cannot export this")], ids=["TypeError", "BufferError"])
def test_a_producers_type_error_or_buffer_error_is_a_refusal(m, exc):
    with pytest.raises(TypeError, match="incompatible function arguments"):
        m.dtypes_plain(Raising(exc), np.float32(2.0))


@pytest.mark.parametrize("name", sorted(RAISED))
def test_a_function_written_against_cpython_raises_the_producers_exception_as_it_is(typed_modules, name):
    """raw_scale_ makes its parameter with Tensor's constructor: a plain TypeError or BufferError is named (a new
    exception 'argument 'x': ...', the producer's as its cause); anything else is the producer's own object."""
    exc = RAISED[name]()
    with pytest.raises(BaseException) as info:
        typed_modules["pybind11"].raw_scale_(Raising(exc), 2.0)
    assert info.value is exc


def test_a_function_written_against_cpython_names_the_argument_of_a_plain_refusal(typed_modules):
    exc = BufferError("cannot export this")
    with pytest.raises(BufferError, match="^argument 'x': cannot export this$") as info:
        typed_modules["pybind11"].raw_scale_(Raising(exc), 2.0)
    assert info.value.__cause__ is exc
