// axpy_pybind11: the axpy kernels of examples/axpy_kernels, bound with pybind11 through
// torch_dlpack_bridge/pybind11.h, with typed parameters (tdb::Tensor<...>). No torch
// headers, no torch link: only pybind11, Python.h and DLPack.
//
//   axpy_(a, x, y)    y = a*x + y in place; 1-D float32 CPU vectors of equal length.
//                     x may have any stride (even negative or zero); y must be
//                     contiguous and writable.
//   scaled_copy(a, x) a new contiguous float32 tensor a*x, any shape and strides of x,
//                     allocated by x's producer (a torch.Tensor for a torch.Tensor x;
//                     producers without a table cannot allocate).
//   sum(x)            the sum of a float32 CPU tensor of any shape, computed without the
//                     GIL: an owning export (tdb::ManagedTensor) keeps x's memory alive
//                     while the GIL is released.
#include <pybind11/pybind11.h>

#include <torch_dlpack_bridge/pybind11.h>

namespace py = pybind11;

// Typed parameters (torch_dlpack_bridge/tensor.h): the caster checks what each kernel
// accepts before the call (a tensor it does not take gets the binding library's
// TypeError, which lists these constraints and, through tdb::explain_refusals(m) at the
// end of the module, says which one failed); tdb::named names the argument in checks
// made in the body (check_same_shape below), where a caster cannot know the name.
static constexpr char kX[] = "x";
static constexpr char kY[] = "y";
using Vector =  // read, any stride
    tdb::Tensor<const float, tdb::ndim<1>, tdb::device::cpu, tdb::named<kX>>;
using DenseVector =  // written in place
    tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu, tdb::named<kY>>;
using AnyShape =  // any rank and strides
    tdb::Tensor<const float, tdb::device::cpu, tdb::named<kX>>;

void axpy_(float a, Vector x, DenseVector y) {
  tdb::check_same_shape(x, y);  // relations between arguments stay explicit
  // tdb::StridedView<const float, 1>: xv(i) is x's data[i * stride]
  const auto xv = x.view();
  // tdb::ContiguousView<float, 1>: yv(i) is y's data[i]
  const auto yv = y.view();
  for (int64_t i = 0, n = yv.size(0); i < n; ++i) yv(i) += a * xv(i);
}

// A typed output (torch_dlpack_bridge/output.h): a new float32 tensor of any rank,
// row-major, owned here until returned; the caster then hands it to x's producer (a
// torch.Tensor for a torch.Tensor x).
using Result = tdb::OwnedTensor<float>;

Result scaled_copy(float a, AnyShape x) {
  // x's producer allocates it (torch's allocator), on x's device
  Result out = Result::empty_like(x);
  const float* xp = x.data();
  float* op = out.data();
  tdb::for_each_offset(x.dl(), [&](int64_t i, int64_t off) { op[i] = a * xp[off]; });
  return out;
}

double sum(tdb::ManagedTensor x) {
  // checks on a DLTensor take the argument's name
  tdb::check_device(x.dl(), "x", kDLCPU);
  tdb::check_dtype(x.dl(), "x", tdb::kFloat32);
  py::gil_scoped_release no_gil;  // x owns its export: nothing can free its memory
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
  m.def("sum", &sum, py::arg("x"),
        "Sum of a float32 CPU tensor, computed with the GIL released.");
  tdb::explain_refusals(m);  // a refused call's TypeError says why (after the last def)
}
