"""Every tensor a body reads lives until the body returns, however its container was made (issue 59): items made
while a list converts (a generator, `map`, an iterator, a sequence whose `__getitem__` builds each item, nested
lists), a list the body's own callback empties, tuples, optionals and variants, in tdb's containers and the binding
libraries' own. Each body first runs a callback that drops what the caller held, collects garbage and fills freed
memory with other values (tests/refusals_module.cpp), then reads every item. Before, the items of a container made
during the conversion lived only in the library's temporary tuple, and a view made through a table holds no reference
to its tensor: the bodies read freed memory (510078.7, 1.29e+20, -1.7e+38 instead of 30.0).
"""
import gc

import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
from test_refusals import refusal_modules  # noqa: F401  (the fixture)
from typed_tensor_build import FLAVOURS

TOTAL = 3.0 * (1 + 2 + 3 + 4)  # made(1) .. made(4)


@pytest.fixture(params=FLAVOURS)
def m(request, refusal_modules):  # noqa: F811
    return refusal_modules[request.param]


def made(k):
    """A tensor that only its container holds: [k, k, k] float32."""
    return torch.full((3,), float(k))


def churn():
    """Frees what nothing holds any more and fills the freed memory with -7.0 (same sizes reuse the same blocks)."""
    gc.collect()
    return [torch.full((3,), -7.0) for _ in range(400)]


class Building:
    """A sequence that makes each item as it is asked for (`__getitem__`), holding none of them."""

    def __init__(self, n, item=made):
        self.n, self.item = n, item

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return self.item(i + 1)


def four():
    return [made(k) for k in range(1, 5)]


# form -> (makes the argument, whether the flavour takes that kind of iterable)
LIST_FORMS = {
    "a generator": (lambda: (made(k) for k in range(1, 5)), {"pybind11"}),
    "map": (lambda: map(made, range(1, 5)), {"pybind11"}),
    "an iterator of a list": (lambda: iter(four()), set()),  # neither library takes a bare iterator
    "a sequence building its items": (lambda: Building(4), {"pybind11", "nanobind"}),
    "a list": (four, {"pybind11", "nanobind"}),
    "a tuple": (lambda: tuple(four()), {"pybind11", "nanobind"}),
}


def flavour(m):
    return m.__name__.rsplit("_", 1)[1]


@pytest.mark.parametrize("function", ["total_after", "views_after"])
@pytest.mark.parametrize("form", list(LIST_FORMS))
def test_the_items_of_a_list_parameter_live_until_the_body_returns(m, function, form):
    # total_after: a std::vector of typed tensors (tdb's container caster); views_after: a std::vector of
    # tdb::TensorView (the binding library's own container).
    make, takes = LIST_FORMS[form]
    f = getattr(m, function)
    if flavour(m) not in takes:
        with pytest.raises(TypeError, match="incompatible function arguments"):
            f(make(), churn)
        return
    kept = []
    assert f(make(), lambda: kept.append(churn())) == TOTAL


@pytest.mark.parametrize("function", ["total_after", "views_after"])
def test_a_list_that_the_body_empties_still_feeds_the_body(m, function):
    # The caller's list is the only holder of its items; the body's callback empties it.
    xs, kept = four(), []

    def callback():
        xs.clear()
        kept.append(churn())

    assert getattr(m, function)(xs, callback) == TOTAL


def test_the_items_of_nested_lists_live_until_the_body_returns(m):
    kept = []
    rows = Building(2, lambda i: Building(2, lambda j: made(2 * (i - 1) + j)))  # [[1, 2], [3, 4]], all made on demand
    assert m.nested_after(rows, lambda: kept.append(churn())) == TOTAL
    outer = [Building(2), [made(3), made(4)]]
    assert m.nested_after(outer, lambda: (outer.clear(), kept.append(churn()))) == TOTAL
    if flavour(m) == "pybind11":  # generators of generators
        gens = ((lambda i: (made(2 * i + j) for j in (1, 2)))(i) for i in (0, 1))
        assert m.nested_after(gens, lambda: kept.append(churn())) == TOTAL


@pytest.mark.parametrize("function", ["optional_after", "variant_after"])
def test_an_optional_or_variant_argument_lives_until_the_body_returns(m, function):
    kept = []
    assert getattr(m, function)(made(5), lambda: kept.append(churn())) == 15.0


def test_a_vector_cast_in_a_body_keeps_its_items_or_refuses(m):
    # cast_total converts its argument itself (py::cast / nb::cast of a std::vector of typed tensors), then runs the
    # callback, then reads. A list holds its items. pybind11 keeps the items of a sequence that makes them in the
    # call's temporaries; nanobind's cast keeps nothing past itself, so it refuses such a sequence.
    kept = []
    xs = four()
    assert m.cast_total(xs, lambda: kept.append(churn())) == TOTAL
    if flavour(m) == "pybind11":
        assert m.cast_total(Building(4), lambda: kept.append(churn())) == TOTAL
    else:
        with pytest.raises(RuntimeError, match="bad_cast"):  # nanobind's own words for a failed nb::cast
            m.cast_total(Building(4), lambda: kept.append(churn()))
