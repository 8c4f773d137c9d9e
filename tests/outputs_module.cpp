// A test module for tests/test_outputs.py: typed owning outputs (tdb::OwnedTensor, torch_dlpack_bridge/output.h)
// returned through the pybind11 caster, or the nanobind caster when compiled with -DTDB_USE_NANOBIND; the pybind11
// build also holds raw_* functions written against CPython directly (METH_FASTCALL, tdb::guard). TDB_MODULE names it.
#include <cstdint>
#include <tuple>
#include <utility>

#if defined(TDB_USE_NANOBIND)
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>

#include <torch_dlpack_bridge/nanobind.h>
namespace py = nanobind;
#define TDB_TEST_MODULE(name, m) NB_MODULE(name, m)
#else
#include <pybind11/pybind11.h>

#include <torch_dlpack_bridge/pybind11.h>
namespace py = pybind11;
#define TDB_TEST_MODULE(name, m) PYBIND11_MODULE(name, m)
#endif

namespace {

static constexpr char kX[] = "x";
static constexpr char kOut[] = "out";
using Vector = tdb::Tensor<const float, tdb::ndim<1>, tdb::named<kX>>;  // any device: tdbdev memory is host memory
using Out = tdb::OwnedTensor<float, tdb::ndim<1>>;

static_assert(std::is_same<decltype(std::declval<Out&>().view()), tdb::ContiguousView<float, 1>>::value, "view()");
static_assert(!std::is_copy_constructible<Out>::value && std::is_nothrow_move_constructible<Out>::value, "move-only");

// out = a * x, allocated like x (x's producer and device).
Out scaled(float a, const Vector& x) {
  Out out = Out::empty_like(x);
  const auto o = out.view();
  const auto v = x.view();
  for (int64_t i = 0; i < o.size(0); ++i) o(i) = a * v(i);
  return out;
}

// Through tdb::allocate itself (the untyped owning handle the typed outputs are made of): a * x, float32 on x's device.
tdb::ManagedTensor allocated(float a, const Vector& x) {
  tdb::ManagedTensor out = tdb::allocate(x.api(), {x.size(0)}, tdb::kFloat32, x.device());
  float* o = tdb::data_ptr<float>(out.dl());
  const auto v = x.view();
  for (int64_t i = 0; i < v.size(0); ++i) o[i] = a * v(i);
  return out;
}

// Two outputs: (x + 1, 2 * x).
std::tuple<Out, Out> pair(const Vector& x) {
  Out plus = Out::empty_like(x), twice = Out::empty_like(x);
  const auto v = x.view();
  for (int64_t i = 0; i < v.size(0); ++i) {
    plus.view()(i) = v(i) + 1;
    twice.view()(i) = 2 * v(i);
  }
  return std::make_tuple(std::move(plus), std::move(twice));
}

// The guide's example (docs/guides/kernel-authors.md, Outputs), as written there.
using In = tdb::Tensor<const float, tdb::ndim<1>>;
std::tuple<Out, Out> split(In x) {          // nanobind: include <nanobind/stl/tuple.h>
  Out lo = Out::empty_like(x);              // x's producer, device and shape
  Out hi = Out::empty(x, {x.size(0)});      // x's producer and device, this shape
  auto l = lo.view(), h = hi.view();         // tdb::ContiguousView<float, 1>
  auto v = x.view();                        // tdb::StridedView<const float, 1>
  for (int64_t i = 0; i < v.size(0); ++i) {
    l(i) = v(i) < 0 ? v(i) : 0;
    h(i) = v(i) < 0 ? 0 : v(i);
  }
  return {std::move(lo), std::move(hi)};    // a Python tuple of two torch.Tensor
}

// An output of another dtype and shape than its model: int64 [rows, 3], element (i, j) = 3 * i + j.
tdb::OwnedTensor<int64_t, tdb::shape<-1, 3>> grid(const tdb::TensorView& like, int64_t rows, int64_t cols) {
  auto out = tdb::OwnedTensor<int64_t, tdb::shape<-1, 3>>::empty(like, {rows, cols});
  const auto o = out.view();
  for (int64_t i = 0; i < o.size(0); ++i)
    for (int64_t j = 0; j < o.size(1); ++j) o(i, j) = 3 * i + j;
  return out;
}

// Declares a CPU output: a tensor on another device refuses before anything is allocated.
tdb::OwnedTensor<float, tdb::ndim<1>, tdb::device::cpu, tdb::named<kOut>> cpu_only(const tdb::TensorView& like) {
  return tdb::OwnedTensor<float, tdb::ndim<1>, tdb::device::cpu, tdb::named<kOut>>::empty_like(like);
}

// Any rank: n zero-filled elements per dimension given.
tdb::OwnedTensor<double> zeros(const tdb::TensorView& like, int64_t n, int32_t ndim) {
  int64_t shape[4] = {n, n, n, n};
  auto out = tdb::OwnedTensor<double>::empty(like, ndim, shape);
  for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] = 0.0;
  return out;
}

// A declared rank checked at run time: a 1-D output asked for with `ndim` sizes of 2.
Out vector_of_rank(const tdb::TensorView& like, int32_t ndim) {
  const int64_t shape[4] = {2, 2, 2, 2};
  return Out::empty(like, ndim, shape);
}

// Through a table the kernel names: the one published by the Python type `cls`, on the CPU.
Out arange_from(py::handle cls, int64_t n) {
  if (!PyType_Check(cls.ptr())) throw tdb::Error(PyExc_TypeError, "cls: expected a type");
  std::string why;
  const DLPackExchangeAPI* api = tdb::find_exchange_api(reinterpret_cast<PyTypeObject*>(cls.ptr()), &why);
  if (!api) throw tdb::Error(PyExc_TypeError, "cls " + why);
  Out out = Out::empty(api, tdb::kCPU, {n});
  for (int64_t i = 0; i < n; ++i) out.data()[i] = static_cast<float>(i);
  return out;
}

// Dropped without being returned: the producer's deleter frees it (counted by the tdbdev backend).
int64_t drop(const Vector& x) {
  Out out = Out::empty_like(x);
  return out.numel();
}

// A tuple whose second item cannot be handed over (an empty handle): the first, already a Python tensor, must be
// released with the tuple, and the call raise ValueError.
std::tuple<Out, tdb::ManagedTensor> broken_pair(const Vector& x) {
  return {Out::empty_like(x), tdb::ManagedTensor()};
}

#if !defined(TDB_USE_NANOBIND)
// The raw flavour (no binding library): raw_scaled(a, x) and raw_pair(x).
PyObject* raw_scaled(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    if (n != 2) throw tdb::Error(PyExc_TypeError, "raw_scaled(a, x): 2 arguments");
    const double a = PyFloat_AsDouble(args[0]);
    if (a == -1.0 && PyErr_Occurred()) throw tdb::Error::pending();
    Vector x(args[1], "x");
    Out out = Out::empty_like(x);
    for (int64_t i = 0; i < out.numel(); ++i) out.view()(i) = static_cast<float>(a) * x.view()(i);
    return out.to_python();
  });
}
PyObject* raw_broken_pair(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    if (n != 1) throw tdb::Error(PyExc_TypeError, "raw_broken_pair(x): 1 argument");
    Vector x(args[0], "x");
    Out out = Out::empty_like(x), unused = Out::empty_like(x);
    return tdb::to_python_tuple(std::move(out), tdb::ManagedTensor(), std::move(unused));
  });
}
PyObject* raw_pair(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    if (n != 1) throw tdb::Error(PyExc_TypeError, "raw_pair(x): 1 argument");
    Vector x(args[0], "x");
    auto [plus, twice] = pair(x);
    return tdb::to_python_tuple(std::move(plus), std::move(twice));
  });
}
PyMethodDef kRaw[] = {
    {"raw_scaled", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(raw_scaled)), METH_FASTCALL, nullptr},
    {"raw_pair", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(raw_pair)), METH_FASTCALL, nullptr},
    {"raw_broken_pair", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(raw_broken_pair)), METH_FASTCALL,
     nullptr},
};
#endif

}  // namespace

TDB_TEST_MODULE(TDB_MODULE, m) {
#if defined(TDB_USE_NANOBIND)
  tdb::register_nanobind_error_translator();  // arange_from takes no tensor: no argument caster registers it
#else
  tdb::register_pybind11_error_translator();
#endif
  m.def("scaled", &scaled, py::arg("a"), py::arg("x"));
  m.def("allocated", &allocated, py::arg("a"), py::arg("x"));
  m.def("pair", &pair, py::arg("x"));
  m.def("split", &split, py::arg("x"));
  m.def("grid", &grid, py::arg("like"), py::arg("rows"), py::arg("cols"));
  m.def("cpu_only", &cpu_only, py::arg("like"));
  m.def("zeros", &zeros, py::arg("like"), py::arg("n"), py::arg("ndim"));
  m.def("vector_of_rank", &vector_of_rank, py::arg("like"), py::arg("ndim"));
  m.def("arange_from", &arange_from, py::arg("cls"), py::arg("n"));
  m.def("drop", &drop, py::arg("x"));
  m.def("broken_pair", &broken_pair, py::arg("x"));
#if !defined(TDB_USE_NANOBIND)
  for (PyMethodDef& def : kRaw) m.attr(def.ml_name) = py::reinterpret_steal<py::object>(PyCFunction_New(&def, nullptr));
#endif
}
