"""Why a tensor was refused (issue 37): the lines tdb::explain_refusals(m) adds to the binding library's TypeError,
through both binding libraries (tests/refusals_module.cpp, built once per flavour).

The matrix: {pybind11, nanobind} x {plain, optional, vector, keyword} x {each refusal: dtype, rank, fixed size,
order, device, read-only, expanded, neg and conj views (the producer's refusal), meta and FakeTensor (no data)} x
{one overload, float/double overloads}: the TypeError, the reason line's words for each overload. Then what is never
said (a tensor its overload took, a non-tensor argument that did not convert), nothing left after a later call,
threads and a re-entrant producer; and issue 38.3 (a tdb::Error is translated from a function's first call).
"""
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from conftest import python_env
from typed_tensor_build import FLAVOURS

HERE = os.path.dirname(os.path.abspath(__file__))
WHY = "\n\nWhy the tensor arguments were refused:\n"


@pytest.fixture(scope="session")
def refusal_modules(tmp_path_factory):
    """{flavour: module}: tests/refusals_module.cpp built once per binding library."""
    import typed_tensor_build
    from example_packages import import_from

    paths = typed_tensor_build.build(tmp_path_factory.mktemp("refusals"), os.path.join(HERE, "refusals_module.cpp"),
                                     "tdb_refusals")
    return {flavour: import_from(os.path.dirname(path), f"tdb_refusals_{flavour}") for flavour, path in paths.items()}


@pytest.fixture(params=FLAVOURS)
def m(request, refusal_modules):
    return refusal_modules[request.param]


def read_only():
    a = np.ones((2, 4), dtype=np.float32)
    a.flags.writeable = False
    return a


def fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode().from_tensor(torch.ones(2, 4))


NO_DATA = r"meta tensor or FakeTensor: it has no data .*torch\.library\.custom_op and register_fake"
# kind -> (family, the refused tensor, the words of overload 1's line, those of the double overload's line)
KINDS = {
    "dtype": ("c", lambda: torch.ones(2, 4, dtype=torch.float16), "expected dtype float32, got float16",
              "expected dtype float64, got float16"),
    "rank": ("c", lambda: torch.ones(8), r"expected 2 dimension\(s\), got 1", "expected dtype float64, got float32"),
    "size": ("c", lambda: torch.ones(2, 3), r"expected shape \[-1, 4\], got \[2, 3\]", "expected dtype float64"),
    "order": ("c", lambda: torch.ones(4, 4).t(), r"expected a contiguous tensor, got strides \[1, 4\] for shape \[4, 4\]",
              "expected dtype float64"),
    "device": ("cuda", lambda: torch.ones(2, 4), "expected a cuda tensor, got cpu", "expected dtype float64"),
    "read_only": ("c", read_only, "is read-only$", "expected dtype float64"),
    "expanded": ("any", lambda: torch.ones(4).expand(2, 4),
                 r"is written, and more than one index reaches one element \(strides \[0, 1\] for shape \[2, 4\]; an "
                 r"expanded tensor\): pass a copy, or declare the parameter read-only", "expected dtype float64"),
    "neg": ("c", lambda: torch.ones(2, 4, dtype=torch.complex64).conj().imag,
            r"a tensor with the negative bit set: call \.resolve_neg\(\) first", r"\.resolve_neg\(\)"),
    "conj": ("c", lambda: torch.ones(2, 4, dtype=torch.complex64).conj(),
             r"a tensor with the conjugate bit set: call \.resolve_conj\(\) first", r"\.resolve_conj\(\)"),
    "meta": ("c", lambda: torch.ones(2, 4, device="meta"), NO_DATA, NO_DATA),
    "fake": ("c", fake, NO_DATA, NO_DATA),
}
FORMS = ["plain", "optional", "vector", "keyword"]


def call(m, name, form, x):
    """Calls `name` + "_" + form as the form is used; the vector's refused item is its last."""
    f = getattr(m, f"{name}_{form}")
    if form == "vector":
        return f([x] if name.startswith("cuda") else [torch.ones(2, 4), x], 2.0)
    if form == "keyword":
        return f(a=2.0, x=x)
    return f(x, 2.0)


def reasons(message):
    """The lines added to the library's message (none: [])."""
    return message.split(WHY)[1].split("\n") if WHY in message else []


@pytest.mark.parametrize("overloads", ["one overload", "dtype overloads"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_refusal_says_which_argument_and_why(m, kind, form, overloads):
    family, make, words, double_words = KINDS[kind]
    name = family if overloads == "one overload" else family + "_dtypes"
    with pytest.raises(TypeError) as info:
        call(m, name, form, make())
    assert type(info.value) is TypeError  # the library's own error: same type, same listing, reasons added
    message = str(info.value)
    assert message.startswith(f"{name}_{form}(): incompatible function arguments. The following argument types are "
                              "supported:\n    1. "), message
    assert "\nInvoked with" in message.split(WHY)[0]
    argument = ("argument 'xs', item 0: " if family == "cuda" else "argument 'xs', item 1: ") if form == "vector" \
        else "argument 'x': "
    lines = reasons(message)
    expected = [("overload 1: " + argument, words)]
    if overloads == "dtype overloads" and form == "vector" and family != "cuda":
        # The double overload refuses the list at its first item, the float32 one.
        expected.append(("overload 2: argument 'xs', item 0: ", "expected dtype float64, got float32"))
    elif overloads == "dtype overloads":
        expected.append(("overload 2: " + argument, double_words))
    assert len(lines) == len(expected), message
    for line, (start, pattern) in zip(lines, expected):
        assert line.startswith("    " + start) and re.search(pattern, line[len(start) + 4:]), (line, pattern)


def test_the_pasted_messages(refusal_modules):
    """One message per refusal kind in both flavours, as a user sees them (printed with -s; pinned above)."""
    for flavour, m in refusal_modules.items():
        for kind, (family, make, _, _) in KINDS.items():
            with pytest.raises(TypeError) as info:
                call(m, family + "_dtypes" if kind == "dtype" else family, "plain", make())
            print(f"--- {flavour} {kind}\n" + "\n".join(reasons(str(info.value))))


# The guide's table of reasons (docs/guides/kernel-authors.md includes the file): each row's `x`, given to its
# parameter of tests/refusals_module.cpp, gets exactly that line, in both flavours.
TABLE = os.path.join(HERE, "refusal_reasons.md")
TABLE_PARAMETERS = {"W": "c_plain", "S": "any_plain", "R": "cuda_plain", "std::optional<W>": "c_optional",
                    "std::vector<W>": "c_vector"}


def table_rows():
    """[(refusal, parameter, code, line)]: the table's rows, backticks taken off; "the same as meta" is meta's line."""
    with open(TABLE) as f:
        rows = [[c.strip().replace("`", "") for c in line.strip().strip("|").split(" | ")] for line in f
                if line.startswith("| ")]
    parsed, lines = [], {}
    for refusal, code, line in rows[1:]:
        refusal, parameter = re.fullmatch(r"(.*) \((.*)\)", refusal).groups()
        lines[refusal] = line = lines.get(line.replace("the same as ", ""), line)
        parsed.append((refusal, parameter, code, line))
    return parsed


def test_the_table_names_every_refusal():
    assert [row[0] for row in table_rows()] == [
        "not a tensor", "a class", "dtype", "rank", "fixed size", "order", "device", "read-only", "expanded",
        "sparse", "quantized", "nested", "dtype DLPack lacks", "neg", "conj", "meta", "FakeTensor", "requires grad, a leaf",
        "requires grad, not a leaf", "list item", "list item, not a tensor", "optional"]
    with open(os.path.join(os.path.dirname(HERE), "docs", "guides", "kernel-authors.md")) as f:
        assert "```{include} ../../tests/refusal_reasons.md\n```" in f.read()


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: row[0])
def test_the_guides_table_of_reasons(m, row):
    from torch._subclasses.fake_tensor import FakeTensorMode

    refusal, parameter, code, line = row
    scope = {"torch": torch, "np": np, "FakeTensorMode": FakeTensorMode}
    exec(code if code.startswith("x = ") else "x = " + code, scope)  # noqa: S102  (the table's own snippet)
    with pytest.raises(TypeError) as info:
        getattr(m, TABLE_PARAMETERS[parameter])(scope["x"], 2.0)
    assert reasons(str(info.value)) == ["    " + line]


def test_a_reason_names_the_argument_as_the_binding_library_does(m):
    """The name in a reason line is the one the library's listing gives (py::arg / nb::arg, else its own), whatever
    tdb::named says: both functions' parameter is std::vector<tdb::Tensor<float, ndim<1>, tdb::named<"named">>>."""
    unnamed = "arg0" if "pybind11" in m.__name__ else "arg"
    for f, name in ((m.named_by_arg, "xs"), (m.named_by_library, unnamed)):
        with pytest.raises(TypeError) as info:
            f([torch.ones(2), torch.ones(2, dtype=torch.float16)])
        assert reasons(str(info.value)) == [f"    overload 1: argument '{name}', item 1: expected dtype float32, got float16"]


def test_nothing_is_said_of_a_tensor_its_overload_took(m):
    with pytest.raises(TypeError) as info:
        m.two(torch.ones(2, 4), torch.ones(2, 4, dtype=torch.int8))
    assert reasons(str(info.value)) == ["    overload 1: argument 'y': expected dtype float32, got int8"]
    # A variant took x (its double alternative); n did not convert: nothing to say about a tensor.
    with pytest.raises(TypeError) as info:
        m.variant(torch.ones(2, 4, dtype=torch.float64), "n")
    assert WHY not in str(info.value)
    with pytest.raises(TypeError) as info:
        m.variant(torch.ones(2, 4, dtype=torch.int8), 1)
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected dtype float32, got int8",
                                        "    overload 1: argument 'x': expected dtype float64, got int8"]


@pytest.mark.parametrize("form", FORMS)
def test_nothing_is_said_when_a_non_tensor_argument_did_not_convert(m, form):
    x = [torch.ones(2, 4)] if form == "vector" else torch.ones(2, 4)
    for name in ("c", "c_dtypes"):
        f = getattr(m, f"{name}_{form}")
        with pytest.raises(TypeError, match="incompatible function arguments") as info:
            f(a="2", x=x) if form == "keyword" else f(x, "2")
        # Overload 1 takes the float32 tensor (its scalar did not convert): no line; the double overload refuses the
        # tensor, also where the scalar comes first (the keyword form: f(a, x)) and the library never asked about it.
        item = ", item 0" if form == "vector" else ""
        assert reasons(str(info.value)) == ([] if name == "c" else [
            f"    overload 2: argument '{'xs' if form == 'vector' else 'x'}'{item}: expected dtype float64, got float32"])


def test_nothing_is_left_after_a_later_call(m):
    with pytest.raises(TypeError, match="got float16"):
        m.c_plain(torch.ones(2, 4, dtype=torch.float16), 2.0)
    assert m.c_plain(torch.ones(2, 4), 2.0) == "float32[2]"
    assert m.c_dtypes_vector([torch.ones(3, 4, dtype=torch.float64)], 2.0) == "float64[3]"
    with pytest.raises(TypeError) as info:
        m.c_plain(torch.ones(8), 2.0)
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected 2 dimension(s), got 1"]
    with pytest.raises(TypeError) as info:
        m.c_plain(torch.ones(2, 4), "2")
    assert WHY not in str(info.value)


def test_threads_calling_refused_and_accepted_calls_at_once(m):
    dtypes = [torch.float16, torch.int8, torch.int16, torch.bfloat16, torch.uint8, torch.int32]
    start = threading.Barrier(len(dtypes))
    failures = []

    def work(dtype):
        start.wait()
        name = str(dtype).replace("torch.", "")
        for i in range(100):
            try:
                if i % 2:
                    assert m.c_dtypes_plain(torch.ones(i, 4, dtype=torch.float64), 2.0) == f"float64[{i}]"
                    continue
                with pytest.raises(TypeError) as info:
                    m.c_dtypes_plain(torch.ones(2, 4, dtype=dtype), 2.0)
                assert reasons(str(info.value)) == [
                    f"    overload 1: argument 'x': expected dtype float32, got {name}",
                    f"    overload 2: argument 'x': expected dtype float64, got {name}"], str(info.value)
            except BaseException as e:  # noqa: BLE001  (reported below)
                failures.append(e)
                return

    threads = [threading.Thread(target=work, args=(d,)) for d in dtypes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


def test_a_body_that_lets_another_functions_overload_error_through_runs_once(m):
    calls = []

    def callback():
        calls.append(1)
        m.c_plain(torch.ones(8), 2.0)

    with pytest.raises(TypeError, match=r"^c_plain\(\): incompatible function arguments") as info:
        m.relay(callback)
    assert calls == [1]  # relay's own dispatch took the call: nothing to explain, nothing run twice
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected 2 dimension(s), got 1"]


def test_a_function_without_a_tdb_parameter_is_left_as_it_is(m):
    # Nothing of its could be explained, so explain_refusals leaves its entry point as it is (its calls cost what
    # they cost without it): its own TypeError is not marked as a wrapped call's. The wrapped calls its body makes
    # are whole calls of their own: a producer asked once, refusals explained.
    with pytest.raises(TypeError, match=r"^untyped_relay\(\): incompatible") as info:
        m.untyped_relay(1, 2)
    assert not hasattr(info.value, "__tdb_failed_call__")
    with pytest.raises(TypeError, match=r"^relay\(\): incompatible") as info:
        m.relay(1, 2, 3)
    assert hasattr(info.value, "__tdb_failed_call__")
    with pytest.raises(TypeError, match=r"^tensor_or_int\(\): incompatible") as info:
        m.tensor_or_int(torch.ones(2, 2))  # its first overload takes a tensor, its last does not: wrapped
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected 1 dimension(s), got 2"]
    x = OneShot(torch.ones(3, 4, dtype=torch.float64))
    assert m.untyped_relay(lambda: m.c_dtypes_plain(x, 2.0)) == "float64[3]" and x.asked == 1
    with pytest.raises(TypeError, match=r"^c_plain\(\): incompatible") as info:
        m.untyped_relay(lambda: m.c_plain(torch.ones(8), 2.0))
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected 2 dimension(s), got 1"]


class Reentrant:
    """A producer without a table whose __dlpack__ first calls a kernel with a refused tensor, as a re-entrant
    producer may while the outer call's refusals are being noted."""

    def __init__(self, m, t):
        self.m, self.t, self.inner = m, t, []

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        try:
            self.m.c_plain(torch.ones(8, dtype=torch.float16), 2.0)
        except TypeError as e:
            self.inner.append(str(e))
        return self.t.__dlpack__(**kwargs)


def test_a_reentrant_producer_keeps_each_calls_reasons_apart(m):
    x = Reentrant(m, torch.ones(2, 3))
    with pytest.raises(TypeError) as info:
        m.c_plain(x, 2.0)
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': expected shape [-1, 4], got [2, 3]"]
    assert len(x.inner) == 1  # one dispatch: __dlpack__ asked once (issue 44)
    for inner in x.inner:
        assert reasons(inner) == ["    overload 1: argument 'x': expected dtype float32, got float16"], inner
    assert m.c_plain(Reentrant(m, torch.ones(3, 4)), 2.0) == "float32[3]"


def test_a_none_default_for_an_optional_tensor(m):
    # bias_first binds std::optional<tdb::Tensor<...>> with py::arg("bias") = py::none(), which binding_flavour.h
    # makes nb::arg("bias") = nb::none() for nanobind (what the kernel authors' guide shows for both).
    assert m.bias_first(1) == 1 and m.bias_first(1, None) == 1 and m.bias_first(1, bias=torch.ones(2)) == 2


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_tdb_error_is_translated_from_a_functions_first_call(refusal_modules, flavour):
    # Issue 38.3: bias=None runs no caster that could register the translator; the body's tdb::Error(ValueError)
    # was a RuntimeError in a fresh process until a call with a tensor had registered it.
    module = refusal_modules[flavour]
    code = f"""
import sys
sys.path.insert(0, {os.path.dirname(module.__file__)!r})
m = __import__({module.__name__!r})
try:
    m.bias_first(-1)
except Exception as e:
    print(type(e).__name__, e)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=python_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ValueError n must be >= 0, got -1"


# ---- Issue 44: one dispatch. A call runs its body once with the arguments given, or is refused and nothing ran; the
# reasons are noted while the library resolves the call, each in the record of the call that made it. -------------

F32, F64 = (lambda: torch.ones(2)), (lambda: torch.ones(2, dtype=torch.float64))
LINE_Y = "    overload 1: argument 'y': expected dtype float32, got float64"
LINE_X = "    overload 1: argument 'x': expected dtype float32, got float64"


class OneShot:
    """A producer without a table whose __dlpack__ hands out one capsule, once."""

    def __init__(self, t):
        self.t, self.asked = t, 0

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.asked += 1
        if self.asked > 1:
            raise BufferError("this producer exports once")
        return self.t.__dlpack__(**kwargs)


class OneShotSequence:
    """A sequence that has its items for one pass only (then it is empty)."""

    def __init__(self, items):
        self.items, self.used = items, False

    def __len__(self):
        return 0 if self.used else len(self.items)

    def __getitem__(self, i):
        if self.used or i >= len(self.items):
            raise IndexError(i)
        self.used = i == len(self.items) - 1
        return self.items[i]


def test_a_one_shot_iterable_is_refused_not_run_on_what_is_left(m):
    # Before: the call was dispatched again on the exhausted iterable, converted to [] and the body returned 0.0.
    makers = [lambda: OneShotSequence([F32(), F64()])]
    if "pybind11" in m.__name__:  # pybind11 takes any iterable for a std::vector (nanobind: sequences only)
        makers.append(lambda: (t for t in [F32(), F64()]))
    for make in makers:
        with pytest.raises(TypeError, match=r"^total\(\): incompatible function arguments") as info:
            m.total(make())
        assert WHY not in str(info.value)  # its items are gone; the iterable itself is no tensor to blame
    if "nanobind" in m.__name__:  # nanobind refuses a generator without taking its items: they are left to it
        items = (t for t in [F32(), F64()])
        with pytest.raises(TypeError, match=r"^total\(\): incompatible function arguments") as info:
            m.total(items)
        assert WHY not in str(info.value) and len(list(items)) == 2
    with pytest.raises(TypeError, match=r"^total_doubles\(\): incompatible"):
        m.total_doubles(OneShotSequence([2.0, "x"]) if "nanobind" in m.__name__ else (v for v in [2.0, "x"]))
    assert m.total(OneShotSequence([F32(), F32()])) == 4.0


LINES_F16 = ["    overload 1: argument 'x': expected dtype float32, got float16",
             "    overload 2: argument 'x': expected dtype float64, got float16"]


@pytest.mark.parametrize("through", ["a Python callback", "functools.partial", "no arguments, a Python callback",
                                     "no arguments, functools.partial"])
@pytest.mark.parametrize("inner", ["same module", "other flavour"])
def test_a_callback_that_lets_a_refusal_through_runs_once(refusal_modules, m, inner, through):
    """apply's body runs its callback, which calls apply (this module's or the other flavour's) with a refused
    tensor, or no arguments (an error without reasons), and lets the TypeError through: the outer call is not
    refused (its first overload refused the float64 tensor, its second took it), its body ran once, and the error
    is the inner call's, with the inner call's reasons only. Through functools.partial no Python frame sees the
    inner error before the outer call does."""
    import functools

    other = refusal_modules["nanobind" if "pybind11" in m.__name__ else "pybind11"]
    target = m if inner == "same module" else other
    calls = []
    no_arguments = through.startswith("no arguments")
    inner_call = functools.partial(target.apply, *([] if no_arguments else [lambda: None, torch.ones(2, 4,
                                                                                                    dtype=torch.float16)]))

    def callback():
        calls.append(1)
        inner_call()

    with pytest.raises(TypeError, match=r"^apply\(\): incompatible function arguments") as info:
        m.apply(callback if through.endswith("a Python callback") else inner_call,
                torch.ones(2, 4, dtype=torch.float64))
    assert calls == ([1] if through.endswith("a Python callback") else [])
    assert str(info.value).count(WHY) == (0 if no_arguments else 1)
    assert reasons(str(info.value)) == ([] if no_arguments else LINES_F16)
    # A callback that calls apply and is taken: the outer call is taken too, each body once.
    calls.clear()
    assert m.apply(lambda: calls.append(target.apply(lambda: calls.append(0), torch.ones(3, 4))), torch.ones(1, 4)) \
        == "float32[1]"
    assert calls == [0, "float32[3]"]


def test_another_functions_error_let_through_without_a_frame_gets_no_lines(m):
    # late_c() is not wrapped: its refusal has no lines and, through functools.partial, no traceback either; apply's
    # own notes (its float32 overload refused the float64 x) are not added to it, though its listing also has an x
    # of that type: the name is not apply's.
    import functools

    with pytest.raises(TypeError, match=r"^late_c\(\): incompatible function arguments") as info:
        m.apply(callback=functools.partial(m.late_c, F64()), x=torch.ones(2, 4, dtype=torch.float64))
    assert WHY not in str(info.value)


def test_a_one_shot_producer_is_asked_once_and_the_refused_argument_named(m):
    # Before: the second dispatch found the capsule used, and the only line blamed 'x', which the call took.
    x = OneShot(F32())
    with pytest.raises(TypeError) as info:
        m.Pair(x, F64())
    assert x.asked == 1
    assert reasons(str(info.value)) == [LINE_Y]
    y = OneShot(F64())
    with pytest.raises(TypeError) as info:
        m.Pair(F32(), y)
    assert y.asked == 1 and reasons(str(info.value)) == [LINE_Y]


@pytest.mark.parametrize("form", ["plain", "optional", "vector", "keyword"])
def test_a_one_shot_producer_is_asked_once_by_every_overload_and_pass(m, form):
    # Each overload (and pybind11's second pass, which the int scalar needs) asked __dlpack__ again: the float32
    # overload refused the float64 producer, and the float64 overload then found it used ("this producer exports
    # once"), so a call that one overload takes was refused. The call's export is lent to every caster of the call.
    # A NumPy array's export holds a reference to it: its count shows the export released when the call ends.
    name, rows = f"c_dtypes_{form}", np.ones((3, 4))
    for scalar in (2.0, 2):
        x = OneShot(rows)
        arg = [x] if form == "vector" else x
        before = sys.getrefcount(rows)
        got = getattr(m, name)(a=scalar, x=arg) if form == "keyword" else getattr(m, name)(arg, scalar)
        assert got == "float64[3]" and x.asked == 1
        assert sys.getrefcount(rows) == before  # the export was released when the call ended
    x = OneShot(np.ones((3, 4), dtype=np.float16))
    before = sys.getrefcount(x.t)
    with pytest.raises(TypeError) as info:
        getattr(m, name)(a=2.0, x=x) if form == "keyword" else getattr(m, name)([x] if form == "vector" else x, 2.0)
    assert x.asked == 1
    assert len(reasons(str(info.value))) == 2  # both overloads say why, from the one export
    after = sys.getrefcount(x.t)  # (not in the assert: pytest keeps its parts alive)
    assert after == before  # the export was released


def test_a_refusing_producer_is_asked_once_by_every_overload(m):
    # Its refusal is raised again for the float64 overload (and pybind11's second pass) without asking it again.
    x = Refusing(torch.ones(3, 4))
    with pytest.raises(TypeError) as info:
        m.c_dtypes_plain(x, 2)
    assert x.asked == 1
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': not today", "    overload 2: argument 'x': not today"]


def test_a_one_shot_producer_given_twice_is_asked_once(m):
    # One export per object per call: the same producer as both arguments of one call.
    x = OneShot(torch.ones(3, 4))
    assert m.two(x, x) == "float32[3]float32[3]" and x.asked == 1


def test_a_nested_calls_export_is_released_when_it_returns(m):
    # The export a call's casters share belongs to that call: relay's callback calls c_dtypes_plain, whose export is
    # released when c_dtypes_plain returns, not when relay does.
    rows, seen = np.ones((3, 4)), []
    before = sys.getrefcount(rows)

    def callback():
        out = m.c_dtypes_plain(OneShot(rows), 2.0)
        seen.append(sys.getrefcount(rows) - before)
        return out

    assert m.relay(callback) == "float64[3]" and seen == [0]


def test_an_unwrapped_functions_refusals_are_not_kept(m):
    # late_c() is defined after explain_refusals. Its casters note a producer's refusal only inside a wrapped call of
    # their thread, and a note holds the refused object: such a note goes with that call; none is made once a call
    # that opened alone on this thread has ended, nor while only another thread's call is open.
    x = Refusing(torch.ones(2, 4))

    def refused():
        with pytest.raises(TypeError, match=r"^late_c\(\)"):
            m.late_c(x)

    assert m.c_plain(torch.ones(2, 4), 2.0) == "float32[2]"  # a wrapped call that opened alone, and ended
    before = sys.getrefcount(x)
    refused()
    assert x.asked > 0
    after = sys.getrefcount(x)
    assert after == before
    m.relay(refused)
    after = sys.getrefcount(x)
    assert after == before
    started, done = threading.Event(), threading.Event()
    other = threading.Thread(target=lambda: m.relay(lambda: (started.set(), done.wait(120))))
    other.start()
    assert started.wait(120)
    refused()
    done.set()
    other.join()
    with pytest.raises(TypeError, match="got float16"):
        m.c_plain(torch.ones(2, 4, dtype=torch.float16), 2.0)
    after = sys.getrefcount(x)
    assert after == before


def test_nothing_is_said_of_none_for_an_optional_or_of_an_overload_the_call_cannot_bind(m):
    # None is what an optional parameter takes; an overload the arguments do not fit (one missing, one too many) was
    # never tried by the library, so its tensors are not explained either.
    for make in (lambda: m.c_optional(None, "x"), lambda: m.two(F64()), lambda: m.c_plain(F64(), 2.0, 3),
                 lambda: m.c_plain(F64(), 2.0, b=3)):
        with pytest.raises(TypeError, match="incompatible function arguments") as info:
            make()
        assert WHY not in str(info.value)


def test_an_error_that_is_not_the_calls_own_gets_no_lines(m):
    # relay's body lets its callback's TypeError through. Neither error is relay's own overload error: late_c's (not
    # wrapped, no Python frame: functools.partial) names another function, and the one raised by Python code has a
    # traceback, though it reads like relay's own and lists a tensor parameter that relay's argument would fail.
    import functools

    with pytest.raises(TypeError, match=r"^late_c\(\): incompatible") as info:
        m.relay(functools.partial(m.late_c, F64()))
    assert WHY not in str(info.value)
    listing = (m.late_c.__doc__ or "").splitlines()[0]
    fake = "relay(): incompatible function arguments. The following argument types are supported:\n    1. " + \
        listing[listing.index("("):] + "\n\nInvoked with: <function>"

    def raises():
        raise TypeError(fake)

    with pytest.raises(TypeError, match=r"^relay\(\): incompatible") as info:
        m.relay(raises)
    assert WHY not in str(info.value)


def test_an_argument_the_library_did_not_reach_is_worded_by_its_producer(m):
    # x is refused first, so the library never asks about y; its line comes from this project's table refusing the
    # meta tensor, in the table's words (before: "a Python exception is set").
    with pytest.raises(TypeError) as info:
        m.two(torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, device="meta"))
    lines = reasons(str(info.value))
    assert lines[0] == "    overload 1: argument 'x': expected dtype float32, got float64"
    assert lines[1].startswith("    overload 1: argument 'y': torch_dlpack_bridge: cannot export a meta tensor"), lines
    assert len(lines) == 2


class Changing:
    """A producer without a table whose __dlpack__ hands out its current tensor (which it may change)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


class Refusing(Changing):
    """A producer whose __dlpack__ refuses (BufferError), counting how often it was asked."""

    asked = 0

    def __dlpack__(self, **kwargs):
        self.asked += 1
        raise BufferError("not today")


def test_a_nested_call_exports_its_producer_again(m):
    # An export is the call's own: a call made inside it (here by apply's callback) asks the producer again. Before,
    # the nested call was lent the outer call's export of the producer's old tensor, and read the wrong data.
    p, seen = Changing(torch.ones(2, 4)), []

    def callback():
        p.t = torch.ones(3, 4)
        seen.append(m.c_plain(p, 2.0))

    assert m.apply(callback, p) == "float32[2]"
    assert seen == ["float32[3]"]


def test_an_export_made_outside_any_call_of_its_thread_is_not_kept(m):
    # late_c() is not wrapped; called on this thread while only another thread has a wrapped call open, its export
    # is its own, not kept: before, this thread's later calls were lent it (the old tensor) from then on.
    inside, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=m.apply, args=(lambda: (inside.set(), release.wait(120)), torch.ones(1, 4)))
    holder.start()
    assert inside.wait(120)
    p = Changing(torch.ones(2, 4))
    before = sys.getrefcount(p.t)
    try:
        assert m.late_c(p) == "float32[2]"
        after = sys.getrefcount(p.t)  # its export (which holds the tensor) went with the call
        assert after == before
    finally:
        release.set()
        holder.join()
    p.t = torch.ones(3, 4)
    assert m.c_plain(p, 2.0) == "float32[3]"
    assert m.c_plain(p, 2.0) == "float32[3]"


def test_a_call_does_not_take_an_enclosing_calls_notes_for_its_own(m):
    # either's first overload noted x's producer refusing; its second took x as an object and ran the callback,
    # whose refused call of the same x asks the producer again (another call) and gets its own lines only.
    class Refusing(Changing):
        asked = 0

        def __dlpack__(self, **kwargs):
            self.asked += 1
            raise BufferError(f"not now ({self.asked})")

    x, seen = Refusing(torch.ones(2, 4)), []

    def callback():
        with pytest.raises(TypeError) as info:
            m.c_dtypes_plain(x, "2")
        seen.append(reasons(str(info.value)))

    assert m.either(x, callback) == "object"
    assert seen == [["    overload 1: argument 'x': not now (2)", "    overload 2: argument 'x': not now (2)"]]


def test_constructors_methods_and_every_calling_form_blame_the_right_argument(m):
    # Before (pybind11): a constructor's listing has no `self` while the call's arguments start with it:
    # Pair(float64, float32) blamed 'y', Pair(float32, float64) had no line.
    for make, line in ((lambda: m.Pair(F64(), F32()), LINE_X), (lambda: m.Pair(F32(), F64()), LINE_Y),
                       (lambda: m.Pair(x=F32(), y=F64()), LINE_Y), (lambda: m.Pair(F32(), y=F64()), LINE_Y),
                       (lambda: m.Pair(y=F64(), x=F32()), LINE_Y),  # nanobind's flag in nargsf was taken for a count
                       (lambda: m.Pair(F32(), F32()).scale(F64()), LINE_X),
                       (lambda: m.Pair.make(F32(), F64()), LINE_Y), (lambda: m.Pair.make(F64(), F32()), LINE_X),
                       (lambda: m.keywords(F32(), y=F64()), LINE_Y), (lambda: m.keywords(F64(), y=F32()), LINE_X),
                       (lambda: m.keywords(F32(), y=F32(), z=F64()), LINE_Z := LINE_Y.replace("'y'", "'z'")),
                       (lambda: m.keywords(z=F64(), y=F32(), x=F32()), LINE_Z),
                       (lambda: m.sub.vec(F64()), LINE_X)):
        with pytest.raises(TypeError) as info:
            make()
        assert reasons(str(info.value)) == [line], str(info.value)
    assert m.Pair(F32(), F32()).scale(F32()) == 8 and m.Pair.make(F32(), F32()) == 4
    assert m.keywords(F32(), y=F32()) == 4 and m.sub.vec(F32()) == 2


def test_a_function_defined_after_explain_refusals_gives_the_librarys_message(m):
    # Not wrapped (neither library has a hook where a function is defined): the guide and refusals.h say so.
    with pytest.raises(TypeError, match=r"^late\(\): incompatible function arguments") as info:
        m.late(F64())
    assert WHY not in str(info.value)
    assert m.late(F32()) == 2


class Item(torch.Tensor):
    """A tensor whose repr is short: pybind11's message shows every argument's repr."""

    def __repr__(self):
        return "t"


def test_a_100000_item_list_is_refused_in_linear_time(m):
    # Before: each item was matched against every note (48,000 items then a refused one: 2.4-4.5 s; 100,000: minutes).
    # Compared with the same refusal unexplained (late_total: the library's own conversion and message), in the same
    # process: a generous bound, the old matching was hundreds of times over it.
    import time

    n = 100_000
    ok = torch.ones(1).as_subclass(Item)
    xs = [ok] * n + [torch.ones(1, dtype=torch.float64).as_subclass(Item)]

    def refused(f, *args):
        start = time.perf_counter()
        with pytest.raises(TypeError) as info:
            f(*args)
        return time.perf_counter() - start, reasons(str(info.value))

    unexplained, none = refused(m.late_total, xs)
    explained, lines = refused(m.total, xs)
    assert none == [] and lines == [f"    overload 1: argument 'xs', item {n}: expected dtype float32, got float64"]
    assert explained < 10 * unexplained + 2.0, (explained, unexplained)
    # Two overloads: the float32 one takes every item before refusing the last, in both of pybind11's passes.
    xs[-1] = torch.ones(1, dtype=torch.float16).as_subclass(Item)
    explained, lines = refused(m.total_dtypes, xs)
    assert lines == [f"    overload 1: argument 'xs', item {n}: expected dtype float32, got float16",
                     "    overload 2: argument 'xs', item 0: expected dtype float64, got float32"]
    assert explained < 10 * unexplained + 2.0, (explained, unexplained)


def test_threads_with_one_shot_producers_and_callbacks_keep_their_notes_apart(m):
    """Each thread's refused calls name its own refused argument, ask each producer once and run no body; its taken
    calls run the body once; a callback's refusal stays the callback's."""
    start = threading.Barrier(4)
    failures = []

    def work(k):
        start.wait()
        try:
            for i in range(30):
                x = OneShot(torch.ones(k + 1))
                with pytest.raises(TypeError) as info:
                    m.Pair(x, F64()) if i % 2 else m.Pair(F64(), x)
                # x first: asked once; x second, after a refused first argument: never asked.
                assert x.asked == i % 2 and reasons(str(info.value)) == [LINE_Y if i % 2 else LINE_X]
                calls = []

                def callback():
                    calls.append(k)
                    m.apply(lambda: None, torch.ones(k + 1, 4, dtype=torch.float16))

                with pytest.raises(TypeError) as info:
                    m.apply(callback, torch.ones(k + 1, 4, dtype=torch.float64))
                assert calls == [k]
                assert reasons(str(info.value)) == LINES_F16
                assert m.Pair(OneShot(torch.ones(k + 1)), F32()).scale(F32()) == 2 * (k + 3)
        except BaseException as e:  # noqa: BLE001  (reported below)
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


# What a non-tensor argument is told (issue 45.6), by a typed parameter (c_plain), an untyped one (view: TensorView;
# managed: ManagedTensor) and a list's item: its type's name, or the class named as one.
NON_TENSORS = {"int": (lambda: 3, "expected a tensor, got 'int'"),
               "class": (lambda: torch.Tensor, "expected a tensor, got the class 'Tensor'"),
               "neither": (object, "expected a tensor, got 'object'")}


@pytest.mark.parametrize("function", ["c_plain", "view", "managed"])
@pytest.mark.parametrize("kind", NON_TENSORS)
def test_a_non_tensor_argument_is_told_what_it_is(m, function, kind):
    make, words = NON_TENSORS[kind]
    with pytest.raises(TypeError) as info:
        getattr(m, function)(make(), 2.0)
    assert reasons(str(info.value)) == ["    overload 1: argument 'x': " + words]


def test_a_non_tensor_item_is_told_what_it_is(m):
    with pytest.raises(TypeError) as info:
        m.c_vector([torch.ones(2, 4), torch.Tensor], 2.0)
    assert reasons(str(info.value)) == ["    overload 1: argument 'xs', item 1: expected a tensor, got the class 'Tensor'"]
