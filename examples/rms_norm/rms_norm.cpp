// rms_norm: one complete kernel. It writes its input in place (a written typed
// parameter), takes an optional typed parameter (weight=None), returns a new tensor
// (tdb::OwnedTensor) and says why a tensor was refused (tdb::explain_refusals).
// No torch header, no torch link.
#include <cmath>
#include <optional>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional parameters

#include <torch_dlpack_bridge/pybind11.h>

namespace py = pybind11;

static constexpr char kX[] = "x";
static constexpr char kWeight[] = "weight";
static constexpr char kRms[] = "rms";
using Rows =  // written in place: float32, 2-D, row-major, CPU
    tdb::Tensor<float, tdb::ndim<2>, tdb::c_contig, tdb::device::cpu, tdb::named<kX>>;
using Weight =  // read: float32, 1-D, any stride, CPU
    tdb::Tensor<const float, tdb::ndim<1>, tdb::device::cpu, tdb::named<kWeight>>;
using Rms =  // returned: a new float32 vector, allocated by x's producer
    tdb::OwnedTensor<float, tdb::ndim<1>, tdb::named<kRms>>;

// x[i, :] = x[i, :] / rms[i] * weight, where rms[i] = sqrt(mean(x[i, :]^2) + eps);
// returns rms.
Rms rms_norm_(Rows x, std::optional<Weight> weight, double eps) {
  const auto xv = x.view();  // tdb::ContiguousView<float, 2>: xv(i, j)
  const int64_t rows = xv.size(0), cols = xv.size(1);
  std::optional<tdb::StridedView<const float, 1>> w;  // weight's w(j), if given
  if (weight) {
    tdb::check_shape(*weight, {cols});  // ValueError before any write
    w = weight->view();
  }
  Rms rms = Rms::empty(x, {rows});  // x's producer and device: a torch.Tensor
  const auto r = rms.view();        // tdb::ContiguousView<float, 1>
  for (int64_t i = 0; i < rows; ++i) {
    double squares = 0;
    for (int64_t j = 0; j < cols; ++j) squares += double(xv(i, j)) * xv(i, j);
    r(i) = float(std::sqrt(squares / double(cols) + eps));
    const float inv = 1.0f / r(i);
    for (int64_t j = 0; j < cols; ++j)
      xv(i, j) *= w ? inv * (*w)(j) : inv;
  }
  return rms;
}

PYBIND11_MODULE(rms_norm, m) {
  m.doc() = "One complete kernel over the DLPack exchange table, bound with pybind11.";
  m.def("rms_norm_", &rms_norm_, py::arg("x"), py::arg("weight") = py::none(),
        py::arg("eps") = 1e-6,
        "Normalizes each row of x in place by its RMS (times weight); returns the RMS.");
  tdb::explain_refusals(m);  // a refused call's TypeError says why (after the last def)
}
