"""Tensor parameters as kernel authors write them, through both binding libraries (tests/typed_tensor_module.cpp).

The matrix: {pybind11, nanobind} x {plain, optional, vector, keyword, None default} x {accepted, constraint
violated, producer refusal (a conj view), not a tensor, a bad scalar beside an accepted tensor} x {one overload
(typed, TensorView, ManagedTensor), dtype overloads whose scalar needs conversion (np.float32 for a float or double
parameter: neither library takes it without conversion)}. Every case runs in a child
process per flavour (nanobind's std::optional and list casters once ended the process with std::terminate), which
reports each outcome; the tests then pin the exact exception type. Then std::variant, the overlap check of written
parameters, the exception rule as docs/guides/kernel-authors.md states it (its table is read from the page), and
consumer.h's refusal of a data-less tensor (FakeTensor, meta; also as torch's own table exports it) in a body.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from conftest import python_env
from typed_tensor_build import FLAVOURS

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDE = os.path.join(os.path.dirname(HERE), "docs", "guides", "kernel-authors.md")

FORMS = ["plain", "optional", "vector", "keyword", "none_default"]
# prefix in the module -> (family, the dtype of the accepted tensor, the kinds of argument that apply)
ELEMENTS = {
    "typed": ("one overload", torch.float32, ["accepted", "violated", "refusal", "not_tensor", "bad_scalar"]),
    "view": ("one overload", torch.float32, ["accepted", "refusal", "not_tensor", "bad_scalar"]),
    "managed": ("one overload", torch.float32, ["accepted", "refusal", "not_tensor", "bad_scalar"]),
    "dtypes": ("dtype overloads", torch.float64, ["accepted", "violated", "refusal", "not_tensor", "bad_scalar"]),
}
CASES = [(prefix, form, kind) for prefix, (_, _, kinds) in ELEMENTS.items() for form in FORMS for kind in kinds]


def argument(prefix, kind):
    """The tensor argument of a case (the scalar beside it, np.float32(2), needs conversion in both libraries)."""
    _, accepted, _ = ELEMENTS[prefix]
    if kind in ("accepted", "bad_scalar"):
        return torch.ones(3, dtype=accepted)
    if kind == "violated":  # one overload takes float32 only; the dtype overloads float32 and float64
        return torch.ones(3, dtype=torch.float64 if prefix == "typed" else torch.int8)
    if kind == "refusal":
        return torch.ones(3, dtype=torch.complex64).conj()  # the producer refuses to export a conj view
    return "x"


def call(m, prefix, form, kind):
    """Calls `<prefix>_<form>` the way the form is used, with the case's arguments."""
    f = getattr(m, f"{prefix}_{form}")
    x = argument(prefix, kind)
    a = "x" if kind == "bad_scalar" else np.float32(2.0)
    if form == "vector":
        x = [argument(prefix, "accepted"), x]  # one bad element refuses the list
    if form == "keyword":
        return f(a=a, x=x)
    if form == "none_default":
        return f(a, x=x)
    return f(x, a)


def expected_result(prefix, form):
    """What the accepted call returns: the overload reached and the values it got."""
    one = "float32[3]" if ELEMENTS[prefix][0] == "one overload" else "float64[3]"
    return (f"{one},{one}" if form == "vector" else one) + "*2"


def run_cases(path, name):
    """In the child: every case of the matrix against module `name` at `path`; prints one JSON line."""
    sys.path.insert(0, os.path.dirname(path))
    m = __import__(name)
    out = {}
    for prefix, form, kind in CASES:
        try:
            out[f"{prefix}-{form}-{kind}"] = ["ok", call(m, prefix, form, kind)]
        except Exception as e:  # noqa: BLE001  (the type is the result)
            out[f"{prefix}-{form}-{kind}"] = ["raised", type(e).__name__, str(e)]
    extra = {"optional-none": lambda: m.typed_optional(None, np.float32(2.0)),
             "none_default-omitted": lambda: m.typed_none_default(np.float32(2.0)),
             "none_default-none": lambda: m.dtypes_none_default(2.5, x=None)}
    for key, fn in extra.items():
        out[key] = ["ok", fn()]
    print("RESULTS " + json.dumps(out))


@pytest.fixture(scope="session")
def outcomes(typed_modules):
    """{flavour: {case: outcome}}, each flavour's cases run in a child process that must exit normally."""
    result = {}
    for flavour in FLAVOURS:
        module = typed_modules[flavour]
        code = (f"import sys; sys.path.insert(0, {HERE!r}); import test_binding_matrix as t; "
                f"t.run_cases({module.__file__!r}, {module.__name__!r})")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env=python_env())
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULTS ")]
        result[flavour] = (res.returncode, res.stderr, json.loads(lines[0][8:]) if lines else {})
    return result


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_process_lives(outcomes, flavour):
    returncode, stderr, cases = outcomes[flavour]
    assert returncode == 0, stderr  # -6 was nanobind's std::terminate
    assert len(cases) == len(CASES) + 3


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("prefix,form,kind", CASES, ids=[f"{p}-{f}-{k}" for p, f, k in CASES])
def test_matrix(outcomes, flavour, prefix, form, kind):
    outcome = outcomes[flavour][2][f"{prefix}-{form}-{kind}"]
    if kind == "accepted":
        assert outcome == ["ok", expected_result(prefix, form)]
        return
    # Everything else is an argument that does not match: the binding library's TypeError, exactly, listing the
    # overloads with their constraints, and blaming no tensor (an accepted one least of all).
    assert outcome[:2] == ["raised", "TypeError"], outcome
    message = outcome[2]
    assert f"{prefix}_{form}(): incompatible function arguments" in message
    assert "expected" not in message
    if prefix in ("typed", "dtypes"):
        assert "DLPackTensorOf[typing.Literal['float32']], dict(dtype='float32', shape=(None,), writable=False)]" in message
    if prefix == "dtypes":
        assert "DLPackTensorOf[typing.Literal['float64']], dict(dtype='float64', shape=(None,), writable=False)]" in message
    if form in ("keyword", "none_default"):
        assert re.search(r"\bx: (typing\.)?(Optional\[)?(typing\.Annotated\[)?torch_dlpack_bridge\.typing\.DLPackTensor",
                         message), message  # py::arg / nb::arg names it


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_none_and_omitted(outcomes, flavour):
    cases = outcomes[flavour][2]
    assert cases["optional-none"] == ["ok", "none*2"] and cases["none_default-omitted"] == ["ok", "none*2"]
    assert cases["none_default-none"] == ["ok", "none*2"]  # the double overload (2.5 takes no conversion there)


def test_the_issues_calls(typed_modules):
    # scal(float64 tensor, 2): the float32 overload refuses the tensor, the float64 one needs the int converted.
    for m in typed_modules.values():
        assert m.dtypes_plain(torch.ones(3, dtype=torch.float64), 2) == "float64[3]*2"
        assert m.dtypes_plain(torch.ones(3, dtype=torch.float64), np.float32(2.0)) == "float64[3]*2"
        assert m.dtypes_plain(torch.ones(3), np.float64(2.0)) == "float32[3]*2"


# ----------------------------------------------------------------------------- std::variant


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_variant(typed_modules, flavour):
    m = typed_modules[flavour]
    assert m.variant(torch.ones(2)) == "float32[2]" and m.variant(torch.ones(2, dtype=torch.float64)) == "float64[2]"
    assert m.variant(3) == "int"
    assert m.view_variant(torch.ones(4, dtype=torch.int8)) == "int8[4]" and m.view_variant("s") == "str"
    for fn, x in [(m.variant, torch.ones(2, dtype=torch.int8)), (m.variant, torch.ones(2, dtype=torch.complex64).conj()),
                  (m.view_variant, torch.ones(2, dtype=torch.complex64).conj()), (m.variant, "x")]:
        with pytest.raises(TypeError, match="incompatible function arguments") as info:
            fn(x)
        assert type(info.value) is TypeError


# ----------------------------------------------------------------------------- overlap of written parameters


@pytest.fixture(params=FLAVOURS)
def m(request, typed_modules):
    return typed_modules[request.param]


@pytest.mark.parametrize("make", [lambda b: b.expand(2, 3), lambda b: b[:1].expand(3), lambda b: b.unsqueeze(1).expand(3, 4),
                                  lambda b: torch.as_strided(b, (2, 3), (0, 1))], ids=["rows", "one", "columns", "as_strided"])
def test_a_written_parameter_refuses_an_expanded_tensor(m, make):
    base = torch.ones(3)
    with pytest.raises(TypeError, match=r"scale_\(\): incompatible function arguments") as info:
        m.scale_(make(base), 2.0)
    assert type(info.value) is TypeError
    assert base.tolist() == [1.0, 1.0, 1.0]  # nothing written (it was [4, 4, 4] through the expanded rows)
    with pytest.raises(ValueError, match=r"^argument 'v': is written, and more than one index reaches one element "
                                         r"\(strides \[.*\]; an expanded tensor\)") as info:
        m.writable_in_body(make(base))
    assert type(info.value) is ValueError


def test_what_the_overlap_check_takes(m):
    # Size-1 dimensions have any stride; no element, no overlap; read-only parameters take expanded tensors.
    base = torch.ones(3)
    m.scale_(torch.as_strided(base, (1, 3), (0, 1)), 2.0)
    assert base.tolist() == [2.0, 2.0, 2.0]
    m.scale_(torch.empty(0, 1).expand(0, 3), 2.0)
    assert m.sum_ro(torch.arange(3.0).expand(4, 3)) == 12.0
    y = torch.ones(2, 3)
    m.scale2_(y[:, ::2], 3.0)  # strided, not overlapping
    assert y.tolist() == [[3.0, 1.0, 3.0], [3.0, 1.0, 3.0]]
    # Not detected (documented): overlap without a zero stride. torch's own check does not see it either.
    z = torch.zeros(3)
    m.scale2_(torch.as_strided(z, (2, 2), (1, 1)), 2.0)
    with pytest.raises(TypeError, match=r"fill3_c\(\): incompatible"):  # c_contig: no stride 0 by construction
        m.fill3_c(torch.ones(1, 1, 5).expand(2, 3, 5))


def test_torch_refuses_the_same_in_place():
    # The class of overlap detected is torch's: its in-place operations refuse the expanded tensor too.
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.ones(3).expand(2, 3).mul_(2.0)
    torch.as_strided(torch.zeros(3), (2, 2), (1, 1)).mul_(2.0)  # and let this one through


# ----------------------------------------------------------------------------- the exception rule, as the guide states it


def rule_calls(m):
    """(where, cause) -> a call that has that cause, for every row of the guide's table."""
    conj = torch.ones(2, dtype=torch.complex64).conj()
    ro = np.ones(2, dtype=np.float32)
    ro.flags.writeable = False
    return {
        ("parameter", "not a tensor"): lambda: m.typed_plain("x", 2),
        ("parameter", "dtype violated"): lambda: m.typed_plain(torch.ones(2, dtype=torch.float64), 2),
        ("parameter", "rank, sizes, device, order, writability violated"): lambda: m.typed_plain(torch.ones(2, 2), 2),
        ("parameter", "refused by its producer"): lambda: m.typed_plain(conj, 2),
        ("function body", "not a tensor"): lambda: m.view_in_body("x"),
        ("function body", "dtype violated"): lambda: m.float32_in_body(torch.ones(2, dtype=torch.float64)),
        ("function body", "rank, sizes, device, order, writability violated"): lambda: m.writable_in_body(ro),
        ("function body", "refused by its producer"): lambda: m.view_in_body(conj),
    }


def guide_table():
    """The rows of the exception table in the guide: {(where, cause): exception name}."""
    text = open(GUIDE).read()
    table = text[text.index("<!-- exception-rule:start -->"):text.index("<!-- exception-rule:end -->")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].endswith("Error"):
            rows[(cells[0], cells[1])] = cells[2]
    return rows


def test_the_code_follows_the_guides_exception_rule(m):
    rows, calls = guide_table(), rule_calls(m)
    assert set(rows) == set(calls)
    for key, name in rows.items():
        with pytest.raises(Exception) as info:
            calls[key]()
        assert type(info.value).__name__ == name, (key, info.value)


# ----------------------------------------------------------------------------- data-less tensors in a body

NO_DATA = r"has no data.*custom op with a fake implementation.*torch\.library\.custom_op and register_fake"


def test_a_fake_tensor_in_a_body_says_it_has_no_data(m):
    # A parameter refuses it (the binding library's TypeError); a view made in the body gives the advice.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.ones(3)
        with pytest.raises(BufferError, match=r"^argument 'o': (.|\n)*" + NO_DATA):
            m.view_in_body(x)
        with pytest.raises(TypeError, match="view_plain" + r"\(\): incompatible function arguments"):
            m.view_plain(x, 2.0)
    with pytest.raises(BufferError, match=NO_DATA):
        m.view_in_body(torch.ones(3, device="meta"))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_torchs_table_exports_a_fake_tensor_that_consumer_h_refuses(typed_modules, flavour):
    # torch's table (torch >= 2.10) exports a FakeTensor with data = NULL: consumer.h refuses a DLTensor with
    # elements and no data, whichever producer made it.
    module = typed_modules[flavour]
    code = f"""
import sys, warnings
import torch, torch_dlpack_bridge
from torch._subclasses.fake_tensor import FakeTensorMode
sys.path.insert(0, {os.path.dirname(module.__file__)!r})
m = __import__({module.__name__!r})
print(torch_dlpack_bridge.active_provider()["__dlpack_c_exchange_api__"])
x = FakeTensorMode().from_tensor(torch.ones(3))
try:
    m.view_in_body(x)
except BufferError as e:
    print("BufferError:", str(e).replace(chr(10), " "))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=python_env(TORCH_DLPACK_BRIDGE_PREFER="torch"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    from conftest import torch_at_least

    assert lines[0] == ("torch" if torch_at_least(2, 10) else "torch_dlpack_bridge")
    assert lines[1].startswith("BufferError: argument 'o': ") and re.search(NO_DATA, lines[1]), res.stdout
