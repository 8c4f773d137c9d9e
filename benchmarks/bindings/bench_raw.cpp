// bench_raw: METH_FASTCALL functions over consumer.h (no binding library), for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z), f8(a..h): take tdb::TensorView arguments and read each data pointer.
// new1(x): a new tensor like x (float32, 1-D; tdb::OwnedTensor, output.h), returned through x's producer.
// view_loop(t, iters): ns per tdb::TensorView of t, timed in a C loop (the per-tensor cost of consumer.h).
#include <time.h>

#include <cstdint>

#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/output.h"

namespace {
volatile uintptr_t g_sink;  // keeps the reads of the data pointers

void nargs(Py_ssize_t got, Py_ssize_t want) {
  if (got != want) throw tdb::Error(PyExc_TypeError, "wrong number of arguments");
}

PyObject* f0(PyObject*, PyObject* const*, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 0);
    Py_RETURN_NONE;
  });
}
PyObject* f1(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 1);
    tdb::TensorView x(args[0], "x");
    g_sink = reinterpret_cast<uintptr_t>(x.data<char>());
    Py_RETURN_NONE;
  });
}
PyObject* f3(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 3);
    tdb::TensorView x(args[0], "x"), y(args[1], "y"), z(args[2], "z");
    g_sink = reinterpret_cast<uintptr_t>(x.data<char>()) + reinterpret_cast<uintptr_t>(y.data<char>()) +
             reinterpret_cast<uintptr_t>(z.data<char>());
    Py_RETURN_NONE;
  });
}
PyObject* f8(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 8);
    tdb::TensorView a(args[0], "a"), b(args[1], "b"), c(args[2], "c"), d(args[3], "d"), e(args[4], "e"),
        f(args[5], "f"), g(args[6], "g"), h(args[7], "h");
    uintptr_t sum = 0;
    for (const tdb::TensorView* v : {&a, &b, &c, &d, &e, &f, &g, &h}) sum += reinterpret_cast<uintptr_t>(v->data<char>());
    g_sink = sum;
    Py_RETURN_NONE;
  });
}
double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}
PyObject* view_loop(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 2);
    const long long iters = PyLong_AsLongLong(args[1]);
    if (iters <= 0) throw tdb::Error(PyExc_ValueError, "iters must be positive");
    const double start = now_ns();
    for (long long i = 0; i < iters; ++i) {
      tdb::TensorView x(args[0], "x");
      g_sink = reinterpret_cast<uintptr_t>(x.data<char>());
    }
    return PyFloat_FromDouble((now_ns() - start) / iters);
  });
}

PyObject* new1(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    nargs(n, 1);
    tdb::Tensor<const float, tdb::ndim<1>> x(args[0], "x");
    return tdb::OwnedTensor<float, tdb::ndim<1>>::empty_like(x).to_python();
  });
}

template <class F>
PyCFunction fast(F f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}
PyMethodDef methods[] = {{"f0", fast(f0), METH_FASTCALL, nullptr},
                         {"f1", fast(f1), METH_FASTCALL, nullptr},
                         {"f3", fast(f3), METH_FASTCALL, nullptr},
                         {"f8", fast(f8), METH_FASTCALL, nullptr},
                         {"view_loop", fast(view_loop), METH_FASTCALL, nullptr},
                         {"new1", fast(new1), METH_FASTCALL, nullptr},
                         {nullptr, nullptr, 0, nullptr}};
PyModuleDef module = {PyModuleDef_HEAD_INIT, "bench_raw", nullptr, -1, methods};
}  // namespace

PyMODINIT_FUNC PyInit_bench_raw() { return PyModule_Create(&module); }
