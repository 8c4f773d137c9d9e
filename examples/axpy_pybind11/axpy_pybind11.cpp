// axpy_pybind11: the axpy kernels of examples/axpy_kernels, bound with pybind11 through
// torch_dlpack_bridge/pybind11.h. No torch headers, no torch link: only pybind11, Python.h and DLPack.
//
//   axpy_(a, x, y)    y = a*x + y in place; 1-D float32 CPU vectors of equal length. x may have any
//                     stride (even negative or zero); y must be contiguous and writable.
//   scaled_copy(a, x) a new contiguous float32 tensor a*x, any shape and strides of x, allocated by x's
//                     producer (a torch.Tensor for a torch.Tensor x; producers without a table cannot allocate).
//   sum(x)            the sum of a float32 CPU tensor of any shape, computed without the GIL: an owning
//                     export (tdb::ManagedTensor) keeps x's memory alive while the GIL is released.
#include <pybind11/pybind11.h>

#include <torch_dlpack_bridge/pybind11.h>

namespace py = pybind11;

void axpy_(float a, tdb::TensorView x, tdb::TensorView y) {
  x.set_name("x");  // names used in error messages: "argument 'x': expected dtype float32, got float64"
  y.set_name("y");
  for (const tdb::TensorView* v : {&x, &y}) {
    tdb::check_device(*v, kDLCPU);
    tdb::check_dtype(*v, tdb::kFloat32);
    tdb::check_ndim(*v, 1);
  }
  tdb::check_same_shape(x, y);
  tdb::check_contiguous(y);
  tdb::check_writable(y);
  const int64_t n = y.size(0), incx = x.stride(0);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < n; ++i) yp[i] += a * xp[i * incx];
}

tdb::ManagedTensor scaled_copy(float a, tdb::TensorView x) {
  x.set_name("x");
  tdb::check_device(x, kDLCPU);
  tdb::check_dtype(x, tdb::kFloat32);
  tdb::ManagedTensor out = tdb::allocate_like(x);  // owned here; the caster hands it to x's producer
  const float* xp = x.data<float>();
  float* op = tdb::data_ptr<float>(out.dl());
  tdb::for_each_offset(x.dl(), [&](int64_t i, int64_t off) { op[i] = a * xp[off]; });
  return out;
}

double sum(tdb::ManagedTensor x) {
  tdb::check_device(x.dl(), "x", kDLCPU);  // checks on a DLTensor take the argument's name
  tdb::check_dtype(x.dl(), "x", tdb::kFloat32);
  py::gil_scoped_release no_gil;  // x owns its export: nothing can free the memory meanwhile
  const float* xp = tdb::data_ptr<float>(x.dl());
  double total = 0;
  tdb::for_each_offset(x.dl(), [&](int64_t, int64_t off) { total += xp[off]; });
  return total;
}

PYBIND11_MODULE(axpy_pybind11, m) {
  m.doc() = "Example kernels over the DLPack exchange table, bound with pybind11.";
  m.def("axpy_", &axpy_, py::arg("a"), py::arg("x"), py::arg("y"),
        "y = a*x + y in place (1-D float32 CPU; x any stride, y contiguous).");
  m.def("scaled_copy", &scaled_copy, py::arg("a"), py::arg("x"),
        "New contiguous float32 tensor a*x, allocated by x's producer.");
  m.def("sum", &sum, py::arg("x"), "Sum of a float32 CPU tensor, computed with the GIL released.");
}
