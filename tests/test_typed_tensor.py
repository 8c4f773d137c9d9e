"""Typed tensor parameters (torch_dlpack_bridge/tensor.h: tdb::Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, ...>)
through the pybind11 and nanobind casters.

tests/typed_tensor_module.cpp is compiled once per binding library (the nanobind one with -DTDB_USE_NANOBIND): every
constraint accepted, and refused (the binding library's TypeError at the parameter; the same type made in a
function's body raises the violation with its own type and message), overload dispatch by dtype, rank, device,
memory order and writability, and the accessors (view()) against torch indexing on strided views.
tests/test_binding_matrix.py covers the parameter forms (optional, vector, keyword, None default) and overlap.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from fake_cuda import FakeCuda
from producers import OtherLanes, ReEntrant
import typed_tensor_build
from typed_tensor_build import HERE, INCLUDE, SOURCE, base_cmd

FLAVOURS = typed_tensor_build.FLAVOURS
WARNINGS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]


@pytest.fixture(params=FLAVOURS)
def m(request, typed_modules):
    return typed_modules[request.param]


INCOMPATIBLE = r"\(\): incompatible function arguments"


def refused(m, fn, x, exc, msg, name="tensor"):
    """`fn(x)` is the binding library's TypeError (exactly), and `fn_body(x)`, which makes the same typed parameter
    from a view in its body, raises `exc` with the violation: "argument '<name>': <msg>"."""
    with pytest.raises(TypeError, match=fn + INCOMPATIBLE) as info:
        getattr(m, fn)(x)
    assert type(info.value) is TypeError and "expected" not in str(info.value)
    with pytest.raises(exc, match=f"^argument '{name}': {msg}") as info:
        getattr(m, fn + "_body")(x)
    assert type(info.value) is exc


def fake_cuda(t):
    return t.as_subclass(FakeCuda)


def read_only_array(shape=(3,)):
    a = np.ones(shape, dtype=np.float32)
    a.flags.writeable = False
    return a


# ----------------------------------------------------------------------------- element types

DTYPES = {  # function -> (torch dtype, DLPack name in messages)
    "f32": (torch.float32, "float32"), "f64": (torch.float64, "float64"), "f16": (torch.float16, "float16"),
    "bf16": (torch.bfloat16, "bfloat16"), "c32": (torch.complex32, "complex32"),
    "c64": (torch.complex64, "complex64"), "c128": (torch.complex128, "complex128"),
    "f8e4m3fn": (torch.float8_e4m3fn, "float8_e4m3fn"), "f8e4m3fnuz": (torch.float8_e4m3fnuz, "float8_e4m3fnuz"),
    "f8e5m2": (torch.float8_e5m2, "float8_e5m2"), "f8e5m2fnuz": (torch.float8_e5m2fnuz, "float8_e5m2fnuz"),
    "f8e8m0fnu": (torch.float8_e8m0fnu, "float8_e8m0fnu"),
    "f4e2m1fn_x2": (torch.float4_e2m1fn_x2, "float4_e2m1fnx2"), "b8": (torch.bool, "bool"),
    "i8": (torch.int8, "int8"), "i16": (torch.int16, "int16"), "i32": (torch.int32, "int32"),
    "i64": (torch.int64, "int64"), "u8": (torch.uint8, "uint8"), "u16": (torch.uint16, "uint16"),
    "u32": (torch.uint32, "uint32"), "u64": (torch.uint64, "uint64"),
}


def tensor_of(dtype):
    """A 1-D tensor of `dtype` whose bytes are 1, 2, 3, ... (0/1 for bool)."""
    if dtype is torch.bool:
        return torch.tensor([True, False, True])
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return torch.arange(1, 3 * itemsize + 1, dtype=torch.uint8).view(dtype)


def first_bits(x):
    raw = bytes(x.reshape(-1)[:1].contiguous().view(torch.uint8).tolist())
    return int.from_bytes(raw[:8], "little", signed=False)


@pytest.mark.parametrize("fn", list(DTYPES))
def test_element_type_accepted_and_read(m, fn):
    dtype, _ = DTYPES[fn]
    x = tensor_of(dtype)
    got = getattr(m, fn)(x)
    assert got & ((1 << 64) - 1) == first_bits(x)


@pytest.mark.parametrize("fn", list(DTYPES))
def test_element_type_refused_with_its_message(m, fn):
    _, name = DTYPES[fn]
    other, other_name = (torch.float64, "float64") if fn == "f32" else (torch.float32, "float32")
    refused(m, fn, torch.ones(2, dtype=other), TypeError, f"expected dtype {name}, got {other_name}$")


def test_element_type_refuses_the_same_code_and_bits_with_other_lanes(m):
    refused(m, "f32", OtherLanes(np.ones(4, dtype=np.float32), 2), TypeError, "expected dtype float32, got float32x2$")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e5m2, torch.int16, torch.bool])
def test_no_element_type_accepts_any_dtype(m, dtype):
    assert m.any_dtype(tensor_of(dtype)) == DTYPES[next(k for k, v in DTYPES.items() if v[0] is dtype)][1]


def test_numpy_arrays_are_typed_too(m):
    # A producer without a table (through __dlpack__) is checked the same way.
    assert m.f64(np.array([2.5, 1.0])) == first_bits(torch.tensor([2.5]).double())
    refused(m, "f32", np.ones(2, dtype=np.int32), TypeError, "expected dtype float32, got int32$")


# ----------------------------------------------------------------------------- rank and sizes


@pytest.mark.parametrize("fn,ok,bad,msg", [
    ("rank0", [torch.tensor(1.0)], [torch.ones(1)], r"expected 0 dimension\(s\), got 1"),
    ("rank2", [torch.ones(2, 3), torch.ones(0, 5)], [torch.ones(6), torch.ones(1, 2, 3)],
     r"expected 2 dimension\(s\), got [13]"),
    ("rows_of_3", [torch.ones(5, 3), torch.ones(0, 3), torch.ones(3, 6)[:, ::2]], [torch.ones(3, 4), torch.ones(3, 1)],
     r"expected shape \[-1, 3\], got \[3, [14]\]"),
    ("rows_of_3", [], [torch.ones(3)], r"expected 2 dimension\(s\), got 1"),
    ("fixed_2_any_4", [torch.ones(2, 7, 4), torch.ones(2, 0, 4)], [torch.ones(3, 7, 4), torch.ones(2, 7, 5)],
     r"expected shape \[2, -1, 4\], got \[[23], 7, [45]\]"),
])
def test_rank_and_sizes(m, fn, ok, bad, msg):
    for x in ok:
        getattr(m, fn)(x)
    for x in bad:
        refused(m, fn, x, ValueError, f"{msg}$")


def test_rank_and_sizes_values(m):
    assert m.rank0(torch.tensor(3.0)) == 0 and m.rank2(torch.ones(4, 5)) == 2
    assert m.rows_of_3(torch.ones(7, 3)) == 7 and m.fixed_2_any_4(torch.ones(2, 9, 4)) == 9


# ----------------------------------------------------------------------------- memory order


@pytest.mark.parametrize("make", [
    lambda: torch.ones(4, 3), lambda: torch.ones(5), lambda: torch.tensor(1.0), lambda: torch.ones(4, 3)[1:3],
    lambda: torch.ones(0, 3).t(), lambda: torch.as_strided(torch.ones(9), (1, 3), (99, 1)),
    lambda: torch.ones(3, 1, 2).permute(1, 0, 2)], ids=["2d", "1d", "0d", "rows", "empty", "size1_odd", "size1_perm"])
def test_c_contig_accepted(m, make):
    m.c_contig(make())


@pytest.mark.parametrize("make,strides", [
    (lambda: torch.ones(3, 2).t(), r"\[1, 2\] for shape \[2, 3\]"), (lambda: torch.ones(6)[::2], r"\[2\] for shape \[3\]"),
    (lambda: torch.ones(4, 6)[:, :3], r"\[6, 1\] for shape \[4, 3\]"), (lambda: np.ones(3, dtype=np.float32)[::-1], r"\[-1\]"),
    (lambda: torch.ones(1).expand(3), r"\[0\]")], ids=["transposed", "step", "columns", "negative", "expanded"])
def test_c_contig_refused(m, make, strides):
    refused(m, "c_contig", make(), ValueError, f"expected a contiguous tensor, got strides {strides}")


def test_f_contig(m):
    for x in (torch.ones(3, 2).t(), torch.ones(5), torch.ones(2, 3, 4).permute(2, 1, 0), torch.ones(1, 4)):
        m.f_contig(x)
    refused(m, "f_contig", torch.ones(3, 2), ValueError,
            r"expected a column-major \(f_contig\) tensor, got strides \[2, 1\] for shape \[3, 2\]$")


@pytest.mark.parametrize("make", [lambda: torch.ones(3, 0), lambda: torch.ones(0, 3),
                                  lambda: torch.as_strided(torch.ones(9), (3, 1), (1, 99))],
                         ids=["empty_last", "empty_first", "size1_odd"])
def test_f_contig_accepts_any_strides_where_no_element_needs_them(m, make):
    """As c_contig: the strides of an empty tensor, or of a size-one dimension, address nothing."""
    m.f_contig(make())


# ----------------------------------------------------------------------------- device type


def test_device_type(m):
    assert m.on_cpu(torch.ones(2)) == "cpu"
    assert m.on_cuda(fake_cuda(torch.ones(2))) == "cuda:0"
    refused(m, "on_cpu", fake_cuda(torch.ones(2)), ValueError, "expected a cpu tensor, got cuda:0$")
    refused(m, "on_cuda", torch.ones(2), ValueError, "expected a cuda tensor, got cpu$")


# ----------------------------------------------------------------------------- writability


def test_writability(m):
    ro = read_only_array()
    assert m.writable(torch.ones(2)) is False and m.writable(np.ones(2, dtype=np.float32)) is False
    refused(m, "writable", ro, ValueError, "is read-only$")
    assert m.const_elements(ro) is True and m.const_elements(torch.ones(2)) is False
    assert m.ro_any_dtype(ro) is True and m.ro_any_dtype(torch.ones(2, dtype=torch.int8)) is False


# ----------------------------------------------------------------------------- writes and autograd (issue 38.7)


@pytest.fixture(params=["pybind11", "nanobind", "raw"])
def scale_(request, typed_modules):
    """scale_(x, a), x a written Tensor<float, device::cpu>: through either caster, or Tensor's constructor (raw)."""
    module = typed_modules["pybind11" if request.param == "raw" else request.param]
    return request.param, module.raw_scale_ if request.param == "raw" else module.scale_


def refuses_write(scale_, x, torch_message):
    """scale_(x, 2) is refused and x left as it was: the raw flavour raises torch's RuntimeError with its message
    (named), a caster's parameter does not match (the binding library's TypeError)."""
    flavour, fn = scale_
    before, version = x.detach().clone(), x._version
    if flavour == "raw":
        with pytest.raises(RuntimeError, match="^argument 'x': " + torch_message) as info:
            fn(x, 2.0)
    else:
        with pytest.raises(TypeError, match="scale_" + INCOMPATIBLE) as info:
            fn(x, 2.0)
    assert type(info.value) in (RuntimeError, TypeError)
    assert torch.equal(x.detach(), before) and x._version == version


def test_a_leaf_that_requires_grad_is_refused_as_torch_refuses_it(scale_):
    x = torch.ones(3, requires_grad=True)
    message = "a leaf Variable that requires grad is being used in an in-place operation"
    with pytest.raises(RuntimeError, match=message):
        x.detach().requires_grad_().mul_(2)  # torch's own in-place op: the oracle
    refuses_write(scale_, x, message)
    refuses_write(scale_, torch.nn.Parameter(torch.ones(2)), message)


def test_a_non_leaf_that_requires_grad_is_refused_in_grad_mode(scale_):
    """torch records its own in-place op in the graph; a kernel's write it cannot record, so the gradient would be
    silently wrong: refused (in torch.no_grad() it is allowed, below)."""
    x = torch.ones(3, requires_grad=True)
    refuses_write(scale_, x * 1, "a tensor that requires grad is written by a kernel autograd cannot see")
    refuses_write(scale_, x[1:], "a tensor that requires grad is written by a kernel autograd cannot see")


@pytest.mark.parametrize("make", [lambda x: x * 1, lambda x: x], ids=["non-leaf", "leaf"])
def test_a_write_under_no_grad_bumps_the_version_as_torch_does(scale_, make):
    """Under torch.no_grad() torch writes tensors that require grad (an optimizer's step) and bumps their version,
    so a backward that needs the old values raises: the kernel's write is seen the same way."""
    _, fn = scale_
    results = []
    for write in (lambda y: y.mul_(3.0), lambda y: fn(y, 3.0)):  # torch's in-place op, then the kernel
        x = torch.ones(3, requires_grad=True)
        y = make(x)
        z = (y * y).sum()  # saves y for backward
        version = y._version
        with torch.no_grad():
            write(y)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            z.backward()
        results.append((y.detach().tolist(), y._version - version, str(info.value).split(";")[0]))
    assert results[0] == results[1] and results[1][:2] == ([3.0, 3.0, 3.0], 1)


def test_an_inference_tensor_is_written(scale_):
    """torch refuses its own in-place ops on an inference tensor outside inference mode; no gradient can depend on
    one (torch refuses to save it for backward), so a kernel writes it."""
    _, fn = scale_
    with torch.inference_mode():
        x = torch.ones(3)
    fn(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        x * torch.ones(3, requires_grad=True)


def test_tensors_without_grad_are_written_and_their_version_bumped_once(scale_):
    """As torch's in-place ops bump every tensor they write (issue 44.2; tests/test_write_versions.py)."""
    _, fn = scale_
    x = torch.ones(3)
    fn(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0] and x._version == 1
    a = np.ones(2, dtype=np.float32)
    fn(a, 4.0)
    assert a.tolist() == [4.0, 4.0]


def test_a_read_only_parameter_takes_a_tensor_that_requires_grad(m):
    x = torch.ones(2, 3, requires_grad=True)
    assert m.sum_ro(x) == 6.0 and x._version == 0
    assert m.writable_or_not(torch.ones(3, requires_grad=True)) == "read-only"  # the overload that only reads


# ----------------------------------------------------------------------------- re-entrant producers


def test_an_unbounded_re_entrant_dlpack_ends_with_an_exception(m):
    """Issue 38.4: a __dlpack__ that passes its object to the kernel again, with no end. The parameter's refusal of
    the deepest level (RecursionError) is the binding library's TypeError, which used to make every level retry
    with the legacy signature: 2 ** 1000 calls, a hang. Now one call per level."""
    producer = ReEntrant(m.to_list1)
    with pytest.raises((TypeError, RecursionError)):
        m.to_list1(producer)
    assert not producer.exhausted and producer.deepest > 10
    assert producer.calls <= producer.deepest + 1


# ----------------------------------------------------------------------------- names, order of checks, describe()


def test_named_argument(m):
    # tdb::named names the value (for checks in the body); the caster's refusal is the binding library's error.
    assert m.named_x(torch.ones(2)) == "x"
    refused(m, "named_x", torch.ones(2, dtype=torch.float64), TypeError, "expected dtype float32, got float64$")


@pytest.mark.parametrize("x,exc,msg", [
    (torch.ones(4, 6, dtype=torch.float64)[:, ::2], TypeError, "expected dtype float32, got float64"),
    (torch.ones(4, 6)[:, ::2].t(), ValueError, r"expected shape \[-1, 3\], got \[3, 4\]"),
    (fake_cuda(torch.ones(4, 6)[:, ::2]), ValueError, "expected a cpu tensor, got cuda:0"),
    (torch.ones(4, 6)[:, ::2], ValueError, "expected a contiguous tensor"),
    (np.ones((2, 3), dtype=np.float32)[::1], None, None),
    (read_only_array((2, 3)), ValueError, "is read-only"),
], ids=["dtype", "shape", "device", "contiguity", "ok", "writability"])
def test_checks_report_the_first_violation_in_order(m, x, exc, msg):
    if exc is None:
        assert m.all_of_them(x) == 2
        return
    refused(m, "all_of_them", x, exc, msg)


T = "torch_dlpack_bridge.typing.DLPackTensor"  # what a tensor parameter is in a signature (and in a stub)


def of(dtype):
    """What a parameter of one dtype is: a type per dtype, so that overloads on dtype alone differ in type."""
    return f"torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['{dtype}']]"


def test_signatures_show_the_constraints(m):
    # As valid stub annotations (typing.Annotated, the constraints in the metadata as nanobind's stubgen writes them
    # for nb::ndarray), in docstrings and in the overload error's list.
    assert (f"(arg0: typing.Annotated[{of('float32')}, dict(dtype='float32', writable=True)]"
            in m.f32.__doc__.replace("arg: ", "arg0: "))
    doc = m.all_of_them.__doc__
    assert (f"typing.Annotated[{of('float32')}, dict(dtype='float32', shape=(None, 3), order='C', device='cpu', "
            "writable=True)]" in doc)
    assert f"typing.Annotated[{of('float32')}, dict(dtype='float32', shape=(), writable=False)]" in m.rank0.__doc__
    assert (f"typing.Annotated[{of('float4_e2m1fn_x2')}, dict(dtype='float4_e2m1fn_x2', writable=True)]"
            in m.f4e2m1fn_x2.__doc__)
    assert f"typing.Annotated[{of('bfloat16')}, dict(dtype='bfloat16', shape=(None,), writable=False)]" in m.dtype.__doc__
    assert (f"typing.Annotated[{of('float32')}, dict(dtype='float32', shape=(None, None), order='C', writable=False)]"
            in m.order.__doc__)
    # Issue 40.4: a typed parameter always says whether it is written (a written one refuses read-only and
    # expanded tensors); only an untyped one (tdb::TensorView) is the bare type.
    assert f"(arg0: typing.Annotated[{T}, dict(writable=True)]" in m.any_dtype.__doc__.replace("arg: ", "arg0: ")
    assert f"(arg0: typing.Annotated[{T}, dict(writable=False)]" in m.ro_any_dtype.__doc__.replace("arg: ", "arg0: ")
    views = m.view_plain.__doc__.replace("arg: ", "arg0: ")
    assert f"(arg0: {T}" in views and "Annotated" not in views
    with pytest.raises(TypeError, match=r"incompatible function arguments") as info:
        m.rank("not a tensor")
    assert (f"typing.Annotated[{of('float32')}, dict(dtype='float32', shape=(None, 3), writable=False)]"
            in str(info.value))


def test_several_bad_arguments_give_one_type_error(m):
    bad, good = torch.ones(2, dtype=torch.float64), torch.ones(2)
    conj, meta = torch.ones(2, dtype=torch.complex64).conj(), torch.ones(2, device="meta")
    for fn, args in [("two", (bad, bad)), ("two", (good, bad)), ("two_views", (conj, meta)), ("two_views", (meta, conj))]:
        with pytest.raises(TypeError, match=fn + INCOMPATIBLE) as info:
            getattr(m, fn)(*args)
        assert type(info.value) is TypeError
    assert m.two(good, good) == 1 and m.two_views(good, good) == 1


def test_a_typed_parameter_made_from_a_view(m):
    x = base().reshape(10, 6)[:, 1:5:2]
    assert m.from_view(x) == x.flatten().tolist()
    with pytest.raises(ValueError, match=r"^argument 'v': expected shape \[-1, 2\], got \[10, 6\]$"):
        m.from_view(base().reshape(10, 6))


def test_describe(m):
    assert m.describe() == ("float32, shape [-1, 3], c_contig, device cuda, read-only | "
                            "bfloat16, 2 dimension(s), f_contig, writable | any dtype, writable")


# ----------------------------------------------------------------------------- overloads


def test_dispatch_by_dtype(m):
    for dtype, name in [(torch.float32, "float32"), (torch.float64, "float64"), (torch.int64, "int64"),
                        (torch.bfloat16, "bfloat16")]:
        assert m.dtype(torch.ones(3, dtype=dtype)) == name
    assert m.dtype(np.ones(2, dtype=np.float64)) == "float64"
    # No overload takes it: the binding library's TypeError lists every overload with its constraints.
    for x in (torch.ones(3, dtype=torch.int8), torch.ones(3, 1)):
        with pytest.raises(TypeError, match="dtype" + INCOMPATIBLE) as info:
            m.dtype(x)
        assert type(info.value) is TypeError and "expected" not in str(info.value)
        for name in ("float32", "float64", "int64", "bfloat16"):
            assert (f"typing.Annotated[{of(name)}, dict(dtype='{name}', shape=(None,), writable=False)]"
                    in str(info.value))


def test_a_violation_goes_to_the_next_overload(m):
    assert m.dtype_or_object(torch.ones(2)) == "float32"
    assert m.dtype_or_object(torch.ones(2, dtype=torch.float64)) == "object"
    assert m.dtype_or_object(torch.ones(2, 2)) == "object"
    assert m.dtype_or_object(torch.ones(2, dtype=torch.complex64).conj()) == "object"  # refused by the producer
    assert m.dtype_or_object(torch.Tensor) == "object" and m.dtype_or_object(3) == "object"


def test_dispatch_by_rank_device_order_and_writability(m):
    assert [m.rank(torch.ones(4)), m.rank(torch.ones(4, 3)), m.rank(torch.ones(4, 2))] == ["1", "rows_of_3", "2"]
    assert m.device(torch.ones(2)) == "cpu" and m.device(fake_cuda(torch.ones(2))) == "cuda"
    assert m.order(torch.ones(2, 3)) == "c_contig" and m.order(torch.ones(3, 2).t()) == "strided"
    assert m.writable_or_not(torch.ones(2)) == "writable" and m.writable_or_not(read_only_array()) == "read-only"
    with pytest.raises(TypeError, match="rank" + INCOMPATIBLE):
        m.rank(torch.ones(2, 2, 2))  # rank 3: no overload


def test_non_tensors_get_the_signature_error(m):
    for bad in ([1.0], None, "x", torch.Tensor):
        with pytest.raises(TypeError, match=r"f32\(\): incompatible function arguments"):
            m.f32(bad)


def test_a_producers_refusal_is_the_binding_librarys_type_error(m):
    for fn, x in [("any_dtype", torch.ones(2, dtype=torch.complex64).conj()), ("f32", torch.ones(2, device="meta"))]:
        with pytest.raises(TypeError, match=fn + INCOMPATIBLE) as info:
            getattr(m, fn)(x)
        assert type(info.value) is TypeError


def test_refusals_leave_nothing_behind(m):
    x, y, a = torch.ones(3, dtype=torch.float64), torch.ones(4, 2), read_only_array()
    refs = [sys.getrefcount(o) for o in (x, y, a)]
    for _ in range(100):
        for call in (lambda: m.f32(x), lambda: m.rows_of_3(y), lambda: m.writable(a), lambda: m.dtype(y),
                     lambda: m.c_contig(y.t())):
            with pytest.raises((TypeError, ValueError)):
                call()
        assert m.dtype_or_object(x) == "object" and m.writable_or_not(a) == "read-only"
    assert [sys.getrefcount(o) for o in (x, y, a)] == refs


# ----------------------------------------------------------------------------- accessors against torch indexing

STRIDED = {
    1: [lambda b: b[:7], lambda b: b[::3], lambda b: b.numpy()[8::-1], lambda b: b[4:5].expand(6),
        lambda b: b.reshape(6, 10)[:, 2], lambda b: b[:0]],
    2: [lambda b: b.reshape(6, 10), lambda b: b.reshape(6, 10).t(), lambda b: b.numpy().reshape(6, 10)[1::2, ::-3],
        lambda b: b.reshape(6, 10)[:, 4:5].expand(6, 3), lambda b: b.reshape(60, 1)[::7],
        lambda b: b.numpy().reshape(3, 20)[:, ::4][:, ::-1]],
    3: [lambda b: b.reshape(3, 4, 5), lambda b: b.reshape(3, 4, 5).permute(2, 0, 1),
        lambda b: b.numpy().reshape(3, 4, 5)[:, ::-2, 1::2], lambda b: b.reshape(4, 3, 5).transpose(0, 2)[1:, :, ::3],
        lambda b: b[:2].reshape(1, 2, 1).expand(3, 2, 4)],
}
CASES = [(rank, i) for rank, makers in STRIDED.items() for i in range(len(makers))]


def base():
    return torch.arange(60, dtype=torch.float32) * 1.5 - 7


@pytest.mark.parametrize("rank,i", CASES)
def test_strided_view_reads_like_torch(m, rank, i):
    x = STRIDED[rank][i](base())
    assert getattr(m, f"to_list{rank}")(x) == x.flatten().tolist()


def test_rank0_and_integer_views(m):
    assert m.to_list0(torch.tensor(2.5)) == [2.5] and m.to_list0(base()[7]) == [base()[7].item()]
    x = torch.arange(-20, 40, dtype=torch.int64).reshape(6, 10)[::2, 1::3].t()
    assert m.to_list2_i64(x) == x.flatten().tolist()


def test_view_sizes_and_strides_are_in_elements(m):
    for x in (base().reshape(3, 4, 5), base().reshape(3, 4, 5).permute(2, 0, 1)[::2, :, 1:],
              base().numpy().reshape(3, 4, 5)[:, ::-1]):
        strides = x.stride() if isinstance(x, torch.Tensor) else tuple(s // 4 for s in x.strides)
        assert m.view_layout(x) == [*x.shape, *strides, x.size if isinstance(x, np.ndarray) else x.numel()]
    x = torch.as_strided(base(), (2, 1, 5), (5, 77, 1))  # a size-1 dimension with an odd stride is still dense
    assert m.contiguous_layout(x) == [2, 1, 5, 5, 5, 1, 10]


@pytest.mark.parametrize("make", [lambda b: b.reshape(3, 4, 5), lambda b: b[10:34].reshape(2, 3, 4),
                                  lambda b: torch.as_strided(b, (2, 1, 5), (5, 77, 1)),
                                  lambda b: b.reshape(3, 4, 5)[1:2]], ids=["dense", "offset", "size1_odd", "slab"])
def test_contiguous_view_reads_like_torch(m, make):
    x = make(base())
    assert m.to_list3_c(x) == x.flatten().tolist()
    assert m.to_list1_c(x.flatten()) == x.flatten().tolist()
    y = base().reshape(20, 3)[5:9]
    assert m.to_list2_c_strided(y) == y.flatten().tolist()


@pytest.mark.parametrize("make", [lambda b: b.reshape(6, 10), lambda b: b.reshape(6, 10).t()[::2],
                                  lambda b: b.reshape(6, 10)[1::2, 3:8], lambda b: b[5:].reshape(5, 11)[:, 1::5],
                                  lambda b: b.numpy().reshape(6, 10)[::-2, 3:8],
                                  lambda b: b.numpy()[5:].reshape(5, 11)[:, ::-5]])
def test_strided_view_writes_like_torch(m, make):
    buf = torch.zeros(60)
    y = make(buf)
    expected = buf.clone()
    ye = make(expected)
    for i in range(ye.shape[0]):
        for j in range(ye.shape[1]):
            ye[i, j] = i * 10000 + j * 100
    m.fill2(y)
    assert torch.equal(buf, expected)  # the view's elements, and nothing else, were written


@pytest.mark.parametrize("fill", ["fill3", "fill3_c"])
def test_views_write_3d(m, fill):
    buf = torch.zeros(80)
    y = buf[7:67].reshape(3, 4, 5) if fill == "fill3_c" else buf[7:67].reshape(3, 4, 5).permute(1, 2, 0)[:, 1::2]
    getattr(m, fill)(y)
    idx = torch.cartesian_prod(*[torch.arange(n) for n in y.shape]).to(torch.float32)
    assert y.flatten().tolist() == (idx[:, 0] * 10000 + idx[:, 1] * 100 + idx[:, 2]).tolist()
    assert buf[:7].eq(0).all() and buf[67:].eq(0).all()


def test_view_as_another_type_of_the_same_size(m):
    x = torch.tensor([1.0, -2.0, 3.5, 0.25, 7.0], dtype=torch.bfloat16)[::2]
    assert m.bf16_bits(x) == [float(v & 0xFFFF) for v in x.view(torch.int16).tolist()]


# ----------------------------------------------------------------------------- the header itself


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_header_compiles_without_warnings(flavour):
    cmd = base_cmd(flavour) + ["-fsyntax-only", *WARNINGS, "-Wshadow", "-DTDB_MODULE=warnings_check", SOURCE]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr


def test_accessors_compile_as_device_code_with_nvcc(tmp_path):
    # tests/typed_tensor_cuda.cu: __global__ kernels taking StridedView/ContiguousView (ranks 0-3, a tag type,
    # CUDA's __nv_bfloat16) by value, launched from typed parameters. Compiled to PTX (no GPU needed).
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not available")
    out = tmp_path / "typed_tensor_cuda.ptx"
    cmd = [nvcc, "-std=c++17", "--ptx", f"-I{sysconfig.get_paths()['include']}", f"-I{INCLUDE}",
           os.path.join(HERE, "typed_tensor_cuda.cu"), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    entries = [line for line in out.read_text().splitlines() if ".entry" in line]
    assert len(entries) == 3 and all("StridedView" in e and "ContiguousView" in e for e in entries), entries
    assert any("__nv_bfloat16" in e for e in entries)  # a user's element type through tdb::dtype_traits
