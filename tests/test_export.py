"""Export through the table: dltensor_from_py_object_no_sync (borrowed view) and
managed_tensor_from_py_object_no_sync (owning export), called by the torch-free C consumer `_probe`.

What is pinned: the DLPack dtype of every torch dtype, every strided layout (data = data_ptr(),
byte_offset 0, strides in elements, data NULL when empty), the bytes behind the exported pointer, the
owning export's independence from later in-place changes of its source, and the refusals (BufferError for
what DLPack cannot describe, TypeError for what is not a tensor). torch's own table is the oracle where it
succeeds; where this project deliberately differs the test says so explicitly.
"""

import ctypes
import gc
import textwrap
import warnings

import numpy as np
import pytest
import torch

from conftest import CPU, DLPACK_DTYPES, FLOAT32, run_python
from table_ctypes import GARBAGE, export_into


# ---- helpers ----------------------------------------------------------------------------------------

def extent_bytes(shape, strides, itemsize):
    """Bytes from the first to one past the last element of a strided tensor (0 when empty)."""
    if any(s == 0 for s in shape):
        return 0
    last = sum((n - 1) * s for n, s in zip(shape, strides))
    return (last + 1) * itemsize


def gather(raw, shape, strides, itemsize, offset=0):
    """The elements of a strided tensor over the bytes `raw`, in row-major order, as bytes."""
    if any(s == 0 for s in shape):
        return b""
    cells = np.frombuffer(raw, dtype=np.dtype((np.void, itemsize)))[offset:]
    view = np.lib.stride_tricks.as_strided(cells, shape, [s * itemsize for s in strides])
    return np.ascontiguousarray(view).tobytes()


def storage_bytes(t):
    """All bytes of t's storage (independent of the exported pointer)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy().tobytes()


def elements_through_pointer(probe, info, itemsize):
    """Reads what a C consumer would read through an exported DLTensor, element by element."""
    data, _, _, _, shape, strides, byte_offset = info
    shape, strides = shape or (), strides or ()
    n = extent_bytes(shape, strides, itemsize)
    raw = probe.read(data + byte_offset, n) if n else b""
    return gather(raw, shape, strides, itemsize)


def expected_elements(t):
    """The same elements, read from torch's storage at t's storage offset."""
    return gather(storage_bytes(t), tuple(t.shape), t.stride(), t.element_size(), t.storage_offset())


def expected_info(t, dl_dtype):
    """What a DLTensor for t must say: data = data_ptr() (NULL when empty), byte_offset 0."""
    data = t.data_ptr() if t.numel() else 0
    return (data, CPU, t.dim(), dl_dtype, tuple(t.shape), t.stride(), 0)


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def sample(dtype):
    """64 distinct bytes viewed as `dtype` (0/1 bytes for bool, whose other byte values are invalid)."""
    raw = torch.arange(64, dtype=torch.uint8)
    if dtype is torch.bool:
        raw = raw % 2
    return raw.view(dtype)


ALL_DTYPES = pytest.mark.parametrize("dtype", list(DLPACK_DTYPES), ids=dtype_id)

# Strided layouts of distinct float32 values.
LAYOUTS = {
    "zero_dim": lambda: torch.tensor(3.5),
    "zero_dim_with_offset": lambda: torch.arange(6.0)[4],
    "contiguous": lambda: torch.arange(24.0).reshape(2, 3, 4),
    "size_one_dims": lambda: torch.arange(6.0).reshape(1, 6, 1),
    "size_one_dim_odd_stride": lambda: torch.arange(6.0).as_strided((1, 3), (99, 2)),
    "non_contiguous_step": lambda: torch.arange(24.0).reshape(4, 6)[:, ::2],
    "sliced_storage_offset": lambda: torch.arange(24.0).reshape(4, 6)[1:3, 2:5],
    "expanded_stride_zero": lambda: torch.arange(3.0).expand(4, 3),
    "expanded_scalar": lambda: torch.tensor(7.0).expand(2, 5),
    "channels_last": lambda: torch.arange(120.0).reshape(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted": lambda: torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1),
    "transposed": lambda: torch.arange(24.0).reshape(4, 6).t(),
    "diagonal": lambda: torch.arange(16.0).reshape(4, 4).diagonal(),
    "overlapping_unfold": lambda: torch.arange(10.0).unfold(0, 3, 1),
}
EMPTY_LAYOUTS = {
    "empty_1d": lambda: torch.empty(0),
    "empty_middle_dim": lambda: torch.empty(2, 0, 3),
    "empty_slice_of_data": lambda: torch.arange(6.0)[3:3],
    "empty_rows_of_matrix": lambda: torch.ones(4, 4)[1:1, :],
    "empty_expanded": lambda: torch.ones(1).expand(0, 4),
    "empty_transposed": lambda: torch.empty(0, 3).t(),
}
ALL_LAYOUTS = {**LAYOUTS, **EMPTY_LAYOUTS}


@pytest.fixture(params=["dltensor", "export"])
def describe(request, probe):
    """Either export path, returning the DLTensor as the probe sees it (the Managed is kept alive)."""
    kept = []

    def run(api, t):
        if request.param == "dltensor":
            return probe.dltensor(api, t)
        m = probe.export(api, t)
        kept.append(m)
        return m.info()

    return run


# ---- dtypes -----------------------------------------------------------------------------------------

@ALL_DTYPES
def test_export_maps_every_dtype_to_dlpack_1_3(api, describe, dtype):
    t = sample(dtype)
    assert describe(api, t) == expected_info(t, DLPACK_DTYPES[dtype])


@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"), reason="torch.float4_e2m1fn_x2 does not exist in this torch")
def test_float4_e2m1fn_x2_is_code_17_with_4_bits_and_2_lanes(api, describe):
    t = torch.zeros(5, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert describe(api, t)[3] == (17, 4, 2)


@ALL_DTYPES
def test_export_pointer_reads_the_tensor_bytes_for_every_dtype(probe, api, describe, dtype):
    t = sample(dtype)
    raw = t.view(torch.uint8) if dtype is not torch.uint8 else t
    info = describe(api, t)
    assert probe.read(info[0], 64) == raw.numpy().tobytes()


@ALL_DTYPES
def test_export_strided_view_reads_the_right_elements_for_every_dtype(probe, api, describe, dtype):
    t = sample(dtype)[1::3]
    info = describe(api, t)
    assert info[5] == (3,) and info[0] == t.data_ptr()
    assert elements_through_pointer(probe, info, t.element_size()) == expected_elements(t)


@ALL_DTYPES
def test_export_matches_native_table_for_every_dtype(api, native, describe, dtype):
    t = sample(dtype)
    assert describe(api, t) == describe(native, t)


# ---- layouts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_export_describes_layout_with_data_ptr_and_zero_byte_offset(api, describe, layout):
    t = LAYOUTS[layout]()
    assert describe(api, t) == expected_info(t, FLOAT32)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_export_pointer_reads_layout_values(probe, api, describe, layout):
    t = LAYOUTS[layout]()
    info = describe(api, t)
    read = elements_through_pointer(probe, info, 4)
    assert read == expected_elements(t)
    assert np.array_equal(np.frombuffer(read, dtype=np.float32).reshape(t.shape), t.numpy())


@pytest.mark.parametrize("layout", list(EMPTY_LAYOUTS))
def test_export_of_size_zero_tensor_has_null_data(api, describe, layout):
    t = EMPTY_LAYOUTS[layout]()
    assert t.numel() == 0
    assert describe(api, t) == (0, CPU, t.dim(), FLOAT32, tuple(t.shape), t.stride(), 0)


@pytest.mark.parametrize("layout", list(ALL_LAYOUTS))
def test_export_matches_native_table_for_layout(api, native, describe, layout):
    t = ALL_LAYOUTS[layout]()
    assert describe(api, t) == describe(native, t)


@pytest.mark.parametrize("layout", ["zero_dim", "zero_dim_with_offset"])
def test_export_of_zero_dim_tensor_has_non_null_empty_shape_and_strides(api, describe, layout):
    """NULL would be allowed for ndim == 0, but consumers that check shape != NULL exist; torch's table
    and our borrowed view point at empty arrays, and the owning export does the same."""
    info = describe(api, LAYOUTS[layout]())
    assert info[2] == 0 and info[4:6] == ((), ())


@pytest.mark.parametrize("layout", list(EMPTY_LAYOUTS))
def test_native_table_also_gives_null_data_for_empty_tensors_on_this_torch(api, native, describe, layout):
    """Expected to differ (torch said to keep a non-NULL data pointer for empty tensors), but torch 2.13's
    table exports data_ptr(), which torch itself returns as NULL for numel() == 0 even when the view
    sits inside a non-empty storage: both tables agree on NULL here."""
    t = EMPTY_LAYOUTS[layout]()
    assert describe(api, t)[0] == 0
    assert describe(native, t)[0] == 0


def test_export_of_copy_on_write_clone_materializes_it(probe, api):
    """A lazily-cloned tensor shares storage with its source until written; the consumer may write through
    the exported pointer, so the export must materialize the copy first (never hand out the source's memory)."""
    if not hasattr(torch.Tensor, "_lazy_clone"):
        pytest.skip("this torch has no copy-on-write clones")
    source = torch.arange(4.0)
    clone = source._lazy_clone()
    info = probe.dltensor(api, clone)
    assert info[0] != source.data_ptr() and info[0] == clone.data_ptr()
    imported = probe.export(api, clone).to_python(api)
    imported.fill_(7.0)
    assert torch.equal(source, torch.arange(4.0)) and torch.equal(clone, torch.full((4,), 7.0))


@pytest.mark.parametrize("make", [
    lambda: torch.ones(3, requires_grad=True),
    lambda: torch.ones(3, requires_grad=True) * 2,
    lambda: torch.nn.Parameter(torch.ones(3)),
], ids=["requires_grad_leaf", "requires_grad_non_leaf", "parameter"])
def test_export_accepts_autograd_tensors(api, describe, make):
    t = make()
    assert describe(api, t) == expected_info(t.detach(), FLOAT32)


class TorchFunctionSubclass(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def test_export_accepts_user_subclass_with_torch_function(api, describe):
    t = torch.arange(6.0).reshape(2, 3).as_subclass(TorchFunctionSubclass)
    plain = t.as_subclass(torch.Tensor)
    assert describe(api, t) == expected_info(plain, FLOAT32)


@pytest.mark.parametrize("make", [lambda: torch.empty(2, device="meta"),
                                  lambda: torch.empty(2, device="meta").as_subclass(TorchFunctionSubclass)],
                         ids=["tensor", "subclass"])
def test_refused_owning_export_leaves_null_in_out_whatever_was_there(make):
    """Both paths (the inline one for torch.Tensor, the checked one for subclasses) clear `out` first."""
    out = ctypes.c_void_p(GARBAGE)
    with pytest.raises(BufferError, match="meta tensor"):
        export_into(make(), out)
    assert out.value is None


def test_export_accepts_inference_mode_tensor(api, describe):
    with torch.inference_mode():
        t = torch.ones(3)
    assert describe(api, t) == expected_info(t, FLOAT32)


class AsksPythonForItsDevice(torch.Tensor):
    """A subclass with a device policy (its device comes from __torch_dispatch__): the exporters' fast path
    leaves such tensors to the general one (describe_general in csrc/export.cpp)."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.prim.device.default:
            return torch.device("cpu")
        return NotImplemented


@pytest.mark.parametrize("layout", ["sliced_storage_offset", "zero_dim_with_offset", "diagonal", "transposed"])
def test_general_path_export_of_an_offset_view_points_at_its_first_element(probe, api, native, describe, layout):
    """The general path adds the storage offset too: data is the view's first element, not the storage's."""
    plain = LAYOUTS[layout]()
    t = torch.Tensor._make_subclass(AsksPythonForItsDevice, plain, False, dispatch_device=True)
    assert describe(api, t) == describe(native, t) == expected_info(plain, FLOAT32)
    assert elements_through_pointer(probe, describe(api, t), 4) == expected_elements(plain)


# ---- owning export ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["zero_dim", "contiguous", "transposed", "sliced_storage_offset"])
def test_owning_export_is_version_1_3_with_no_flags(probe, api, layout):
    m = probe.export(api, LAYOUTS[layout]())
    assert m.version() == (1, 3)
    assert m.flags() == 0


def source_3x1x4():
    return torch.arange(12.0).reshape(3, 1, 4)


SOURCE_MUTATIONS = {
    "resize_shrink": lambda t: t.resize_(2),
    "set_other_storage": lambda t: t.set_(torch.zeros(5)),
    "transpose_": lambda t: t.transpose_(0, 2),
    "squeeze_": lambda t: t.squeeze_(),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "as_strided_": lambda t: t.as_strided_((2, 2), (1, 1), 3),
    "t_of_2d": lambda t: t.squeeze_().t_(),
    "data_assignment": lambda t: setattr(t, "data", torch.zeros(2, 2)),
}


@pytest.mark.parametrize("mutation", list(SOURCE_MUTATIONS))
def test_owning_export_survives_source_in_place_change(probe, api, mutation):
    t = source_3x1x4()
    m = probe.export(api, t)
    before = m.info()
    values = elements_through_pointer(probe, before, 4)
    SOURCE_MUTATIONS[mutation](t)
    gc.collect()
    assert m.info() == before
    assert elements_through_pointer(probe, m.info(), 4) == values == torch.arange(12.0).numpy().tobytes()


def test_owning_export_keeps_shape_after_source_resize_grows(probe, api):
    """Growing a storage reallocates it in place (documented limitation: the old data is gone), but the
    shape and strides the consumer holds stay as exported."""
    t = source_3x1x4()
    m = probe.export(api, t)
    before = m.info()
    t.resize_(100, 100)
    assert m.info()[1:] == before[1:]


def test_native_owning_export_follows_source_transpose(probe, native, api):
    """Deliberate difference: torch's owning export points shape/strides into the live TensorImpl, so an
    in-place transpose_ on the source changes what the consumer holds; ours keeps its own copies."""
    t = torch.arange(12.0).reshape(3, 4)
    ours, theirs = probe.export(api, t), probe.export(native, t)
    t.t_()
    assert ours.info()[4:6] == ((3, 4), (4, 1))
    assert theirs.info()[4:6] == ((4, 3), (1, 4))


def counted_source(probe, api, nbytes=48):
    """A float32 tensor of 12 values whose memory a probe-made producer owns: its deleter is counted, so
    the test sees exactly when the storage dies."""
    buf = np.arange(nbytes // 4, dtype=np.float32)
    made = probe.make(buf.ctypes.data, CPU, FLOAT32, [nbytes // 4], [1], owner=buf)
    return made.to_python(api)


@pytest.mark.parametrize("mutation", ["set_other_storage", "data_assignment"])
def test_owning_export_keeps_old_storage_alive_after_source_set_(probe, api, mutation):
    t = counted_source(probe, api)
    m = probe.export(api, t)
    start = probe.deleter_calls()
    SOURCE_MUTATIONS[mutation](t)
    del t
    gc.collect()
    assert probe.deleter_calls() == start, "the export must hold the old storage"
    assert probe.read(m.info()[0], 48) == np.arange(12, dtype=np.float32).tobytes()
    m.delete()
    assert probe.deleter_calls() == start + 1


def test_owning_export_keeps_storage_alive_after_source_dies(probe, api):
    t = counted_source(probe, api)
    m = probe.export(api, t[2:])
    start = probe.deleter_calls()
    del t
    gc.collect()
    assert probe.deleter_calls() == start
    assert probe.read(m.info()[0], 40) == np.arange(2, 12, dtype=np.float32).tobytes()
    del m
    assert probe.deleter_calls() == start + 1


def test_owning_export_deleter_runs_exactly_once_on_delete(probe, api):
    t = torch.arange(6.0)
    m = probe.export(api, t)
    m.count_deletes()
    start = probe.deleter_calls()
    m.delete()
    assert probe.deleter_calls() == start + 1
    with pytest.raises(ValueError):
        m.delete()  # the probe refuses a second call; the count proves the first one ran
    assert probe.deleter_calls() == start + 1
    assert torch.equal(t, torch.arange(6.0))


def test_owning_export_does_not_hold_the_python_tensor(probe, api):
    import weakref
    t = torch.arange(6.0)
    ref = weakref.ref(t)
    m = probe.export(api, t)
    del t
    gc.collect()
    assert ref() is None
    assert probe.read(m.info()[0], 24) == np.arange(6, dtype=np.float32).tobytes()


# ---- refusals ---------------------------------------------------------------------------------------

class StoragelessWrapper(torch.Tensor):
    """A __torch_dispatch__ wrapper subclass: sizes, strides, offset and dtype, no real storage of its own."""

    @staticmethod
    def __new__(cls, storage_offset=0, size=3):
        return torch.Tensor._make_wrapper_subclass(cls, (size,), strides=(1,), storage_offset=storage_offset,
                                                   dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


def fake_tensor():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode().from_tensor(torch.ones(3))


def mkldnn_tensor():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no mkldnn in this torch")
    return torch.ones(3).to_mkldnn()


def nested(layout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=layout)


def empty_of(dtype_name):
    return lambda: torch.empty(3, dtype=getattr(torch, dtype_name))


# the sub-byte shells this torch has (torch 2.4 has uint1..7 but not yet int1..7)
SHELLS = [name for name in [f"uint{i}" for i in range(1, 8)] + [f"int{i}" for i in range(1, 8)] if hasattr(torch, name)]


def shell_case(name):
    """A sub-byte shell dtype (torch.uint1..7, int1..7: no kernels, one byte per element)."""
    c10_name = "UInt" + name[4:] if name.startswith("uint") else "Int" + name[3:]
    return empty_of(name), f"dtype {c10_name}:", "exports"


# (factory, fragment of our message, what torch's native table does: "RuntimeError" or "exports")
REFUSED = {
    "quantized_quint8": (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
                         "quantized", "RuntimeError"),
    "quantized_qint32": (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint32),
                         "quantized", "RuntimeError"),
    **{name: (empty_of(name), f"dtype B{name[1:]}:", "RuntimeError")
       for name in ["bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"]},
    "bits8_view_of_uint8": (lambda: torch.zeros(4, dtype=torch.uint8).view(torch.bits8), "Bits8", "RuntimeError"),
    **{f"shell_{name}": shell_case(name) for name in SHELLS},
    "sparse_coo": (lambda: torch.eye(3).to_sparse(), "layout Sparse", "RuntimeError"),
    "sparse_csr": (lambda: torch.eye(3).to_sparse_csr(), "layout SparseCsr", "RuntimeError"),
    "sparse_csc": (lambda: torch.eye(3).to_sparse_csc(), "layout SparseCsc", "RuntimeError"),
    "sparse_bsr": (lambda: torch.eye(4).to_sparse_bsr((2, 2)), "layout SparseBsr", "RuntimeError"),
    "mkldnn": (mkldnn_tensor, "layout Mkldnn", "RuntimeError"),
    "nested_strided": (lambda: nested(torch.strided), "nested", "RuntimeError"),
    "nested_jagged": (lambda: nested(torch.jagged), "nested", "RuntimeError"),
    "conj_view": (lambda: torch.ones(3, dtype=torch.complex64).conj(), "conjugate", "exports"),
    "neg_view": (lambda: torch._neg_view(torch.ones(3)), "negative", "exports"),
    "imag_of_conj_view": (lambda: torch.ones(3, dtype=torch.complex64).conj().imag, "negative", "exports"),
    "meta": (lambda: torch.empty(3, device="meta"), "meta", "RuntimeError"),
    "fake_tensor": (fake_tensor, "cannot export", "exports"),
}
# Without the fix these export data == NULL with 3 elements, or NULL + offset (a small bogus pointer).
STORAGELESS = {
    "wrapper_subclass": lambda: StoragelessWrapper(),
    "wrapper_subclass_with_storage_offset": lambda: StoragelessWrapper(storage_offset=2),
    "functional_tensor": lambda: torch._to_functional_tensor(torch.ones(3)),
    "functional_tensor_of_slice": lambda: torch._to_functional_tensor(torch.ones(5)[2:]),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_export_refuses_undescribable_tensor_with_buffer_error(api, describe, case):
    make, fragment, _ = REFUSED[case]
    t = make()
    with pytest.raises(BufferError, match=fragment):
        describe(api, t)


@pytest.mark.parametrize("case", list(STORAGELESS))
def test_export_refuses_tensor_without_real_storage_with_buffer_error(api, describe, case):
    t = STORAGELESS[case]()
    assert t.numel() == 3
    with pytest.raises(BufferError, match="storage"):
        describe(api, t)


@pytest.mark.parametrize("case", ["wrapper_subclass", "wrapper_subclass_with_storage_offset", "functional_tensor"])
def test_export_refuses_size_zero_tensor_without_real_storage(api, describe, case):
    """A size-zero tensor has a NULL DataPtr with or without storage, so the NULL-data check cannot tell a
    wrapper subclass apart there: it used to export (data NULL) although wrapper subclasses are refused."""
    t = {"wrapper_subclass": lambda: StoragelessWrapper(size=0),
         "wrapper_subclass_with_storage_offset": lambda: StoragelessWrapper(storage_offset=2, size=0),
         "functional_tensor": lambda: torch._to_functional_tensor(torch.ones(0))}[case]()
    assert t.numel() == 0
    with pytest.raises(BufferError, match="storage"):
        describe(api, t)


def test_export_of_size_zero_plain_and_subclass_tensors_still_works(api, describe):
    class Sub(torch.Tensor):
        pass

    for t in [torch.empty(0), torch.ones(4)[4:], torch.empty(0).as_subclass(Sub), torch.nn.Parameter(torch.empty(0, 3))]:
        assert describe(api, t)[0] == 0


@pytest.mark.parametrize("case", list(REFUSED))
def test_native_table_refuses_with_runtime_error_or_exports_what_we_refuse(api, native, describe, case):
    """Deliberate difference: torch raises RuntimeError (never BufferError), and exports conj/neg views
    (the consumer reads un-negated values), sub-byte shells (as 8-bit ints) and FakeTensors (NULL data)."""
    make, _, native_does = REFUSED[case]
    t = make()
    if native_does == "RuntimeError":
        with pytest.raises(RuntimeError) as error:
            describe(native, t)
        assert not isinstance(error.value, BufferError)
    else:
        describe(native, t)
    with pytest.raises(BufferError):
        describe(api, t)


@pytest.mark.parametrize("name", SHELLS)
def test_native_table_exports_sub_byte_shells_as_8_bit_ints(native, describe, name):
    t = torch.empty(3, dtype=getattr(torch, name))
    code = 1 if name.startswith("u") else 0
    assert describe(native, t)[3] == (code, 8, 1)


class LiesAboutItsClass:
    """isinstance(obj, torch.Tensor) is True through __class__; the C type is not a tensor."""

    @property
    def __class__(self):
        return torch.Tensor


NOT_TENSORS = {
    "None": lambda: None,
    "int": lambda: 1,
    "str": lambda: "x",
    "numpy_array": lambda: np.ones(3, dtype=np.float32),
    "lies_about_class": LiesAboutItsClass,
    "tensor_type_itself": lambda: torch.Tensor,
    "untyped_storage": lambda: torch.ones(3).untyped_storage(),
    "module": lambda: torch.nn.Linear(2, 2),
    "list_of_tensors": lambda: [torch.ones(2)],
}


@pytest.mark.parametrize("case", list(NOT_TENSORS))
def test_export_of_non_tensor_raises_type_error(api, describe, case):
    obj = NOT_TENSORS[case]()
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        describe(api, obj)


def test_object_lying_about_class_passes_isinstance_but_is_refused(api, describe):
    obj = LiesAboutItsClass()
    assert isinstance(obj, torch.Tensor)
    with pytest.raises(TypeError):
        describe(api, obj)


@pytest.mark.parametrize("case", [c for c in NOT_TENSORS if c != "lies_about_class"])
def test_native_table_raises_runtime_error_for_non_tensor(native, describe, case):
    """Deliberate difference: torch's table fails in a pybind11 cast (RuntimeError), not TypeError."""
    with pytest.raises(RuntimeError, match="Unable to cast"):
        describe(native, NOT_TENSORS[case]())


@pytest.mark.parametrize("function", ["dltensor", "export"])
def test_native_table_crashes_on_object_lying_about_class_where_ours_raises(native, function):
    """Deliberate difference, run in a subprocess: torch's table trusts isinstance() and unpacks the
    object as a tensor (SIGSEGV); ours checks the C type and raises TypeError first."""
    code = textwrap.dedent(f"""
        import torch, torch_dlpack_bridge
        from torch_dlpack_bridge import _probe
        class Liar:
            @property
            def __class__(self): return torch.Tensor
        try:
            _probe.{function}(torch_dlpack_bridge.exchange_api(), Liar())
        except TypeError:
            print("ours: TypeError", flush=True)
        _probe.{function}(torch_dlpack_bridge._native_capsule(), Liar())
        print("native: survived", flush=True)
    """)
    result = run_python(code)
    assert "ours: TypeError" in result.stdout
    assert "native: survived" not in result.stdout
    assert result.returncode < 0, (result.returncode, result.stderr[-2000:])
