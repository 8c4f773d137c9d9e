"""Property-based differential fuzzing: random dtypes, shapes, slicing steps, permutes, expands, as_strided
views and storage offsets. This table must agree with the tensor's own metadata and with torch's native
table, and owning round trips must alias and preserve values.

TDB_FUZZ_EXAMPLES sets the number of examples (a few hundred in CI; scripts/fuzz.sh runs thousands)."""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_dlpack_bridge import _probe

EXAMPLES = int(os.environ.get("TDB_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64]


@st.composite
def strided_tensors(draw):
    """An as_strided view (any strides, zeros included, any storage offset) of random bytes, then maybe
    sliced with a step, permuted or expanded."""
    dtype = draw(st.sampled_from(DTYPES))
    numel = draw(st.integers(1, 200))
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (numel * itemsize,), dtype=torch.uint8)
    base = (raw % 2).view(torch.bool) if dtype == torch.bool else raw.view(dtype)
    shape = draw(st.lists(st.integers(0, 4), max_size=5))
    strides = [draw(st.integers(0, 6)) for _ in shape]
    extent = 1 + sum((n - 1) * k for n, k in zip(shape, strides)) if all(shape) else 0
    if extent > numel:
        strides = [0] * len(shape)
        extent = 1 if all(shape) else 0
    offset = draw(st.integers(0, numel - max(extent, 1)))
    t = base.as_strided(shape, strides, offset)
    op = draw(st.sampled_from(["none", "slice", "permute", "expand"]))
    if op == "slice" and t.dim() > 0:
        dim = draw(st.integers(0, t.dim() - 1))
        t = t[(slice(None),) * dim + (slice(draw(st.integers(0, 2)), None, draw(st.integers(1, 3))),)]
    elif op == "permute":
        t = t.permute(draw(st.permutations(range(t.dim()))))
    elif op == "expand":
        t = t.unsqueeze(0).expand(draw(st.integers(0, 3)), *t.shape)
    return t


def as_bytes(t):
    """The tensor's values as bytes in logical order, for comparing contents across dtypes."""
    return torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1).view(torch.uint8)


def expected_view(t):
    data = 0 if t.numel() == 0 else t.data_ptr()
    return data, (1, 0), t.dim(), tuple(t.shape), t.stride(), 0


@FUZZ
@given(strided_tensors())
def test_export_matches_tensor_metadata(api, t):
    data, device, ndim, dtype, shape, strides, offset = _probe.dltensor(api, t)
    assert (data, device, ndim, shape, strides, offset) == expected_view(t)
    managed = _probe.export(api, t)
    assert managed.info() == (data, device, ndim, dtype, shape, strides, offset)


@FUZZ
@given(strided_tensors())
def test_export_agrees_with_torch_native_table(api, native, t):
    ours, theirs = _probe.dltensor(api, t), _probe.dltensor(native, t)
    if t.numel() == 0:  # deliberate difference: DLPack asks for NULL data when there are no elements
        assert ours[0] == 0
        ours, theirs = ours[1:], theirs[1:]
    assert ours == theirs
    assert _probe.export(api, t).info()[1:] == _probe.export(native, t).info()[1:]


@FUZZ
@given(strided_tensors())
def test_round_trip_aliases_and_preserves_values(api, t):
    back = _probe.export(api, t).to_python(api)
    assert (back.dtype, back.shape, back.stride()) == (t.dtype, t.shape, t.stride())
    assert torch.equal(as_bytes(back), as_bytes(t))
    if t.numel():
        assert back.data_ptr() == t.data_ptr()
