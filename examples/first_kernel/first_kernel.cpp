// first_kernel: two kernels over torch tensors (or any DLPack producer's tensors),
// bound with pybind11. No torch headers, no torch link: one binary, every torch version.
#include <cmath>

#include <torch_dlpack_bridge/pybind11.h>

namespace py = pybind11;

// x *= a in place, for a float32 or float64 CPU tensor of any rank and any strides.
template <class T>
void scale_(tdb::Tensor<T, tdb::device::cpu> x, double a) {
  T* data = x.data();
  // Visits every element: `offset` counts elements from the first one, strides applied.
  tdb::for_each_offset(x.dl(), [&](int64_t, int64_t offset) {
    data[offset] *= static_cast<T>(a);
  });
}

// The Euclidean norm of a 1-D float32 CPU vector, which must not be empty.
static constexpr char kX[] = "x";  // x's name in errors tdb raises in a body
using Vector =
    tdb::Tensor<const float, tdb::ndim<1>, tdb::device::cpu, tdb::named<kX>>;

double l2norm(Vector x) {
  if (x.numel() == 0) throw tdb::Error(PyExc_ValueError, "l2norm: x is empty");
  const auto v = x.view();  // v(i) reads element i, whatever x's stride
  double sum = 0;
  for (int64_t i = 0; i < v.size(0); ++i) sum += double(v(i)) * v(i);
  return std::sqrt(sum);
}

PYBIND11_MODULE(first_kernel, m) {
  m.def("scale_", &scale_<float>, py::arg("x"), py::arg("a"));   // float32 tensors
  m.def("scale_", &scale_<double>, py::arg("x"), py::arg("a"));  // float64 tensors
  m.def("l2norm", &l2norm, py::arg("x"));
  tdb::explain_refusals(m);  // a refused call's TypeError says why (after the last def)
}
