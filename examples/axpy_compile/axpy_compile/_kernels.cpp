// axpy_compile._kernels: the torch-free kernel binary of the axpy_compile example. The
// same kind of kernels as examples/axpy_pybind11 (pybind11 +
// torch_dlpack_bridge/pybind11.h; no torch headers, no torch link); the package's ops.py
// registers them as torch custom ops so that they also run under torch.compile.
//
//   axpy_(a, x, y)    y = a*x + y in place; 1-D float32 CPU vectors of equal length,
//                     y contiguous.
//   scaled_copy(a, x) a new contiguous float32 tensor a*x (any shape and strides of x),
//                     allocated by x's producer.
#include <pybind11/pybind11.h>

#include <torch_dlpack_bridge/pybind11.h>

// The producer's current stream for the device the kernel writes to: NULL on CPU; on
// CUDA, torch's current stream, which inside torch.cuda.graph(...) is the capture
// stream, so a launch on it is captured. A CUDA build of this kernel would launch there:
// axpy_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(...).
static void* launch_stream(const tdb::TensorView& out) {
  return tdb::current_stream(out.api(), out.device());
}

void axpy_(float a, tdb::TensorView x, tdb::TensorView y) {
  x.set_name("x");
  y.set_name("y");
  for (const tdb::TensorView* v : {&x, &y}) {
    tdb::check_device(*v, kDLCPU);
    tdb::check_dtype(*v, tdb::kFloat32);
    tdb::check_ndim(*v, 1);
  }
  tdb::check_same_shape(x, y);
  tdb::check_contiguous(y);
  tdb::check_writable(y);
  // NULL here: the CPU loop below runs on the calling thread
  void* stream = launch_stream(y);
  (void)stream;
  const int64_t n = y.size(0), incx = x.stride(0);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < n; ++i) yp[i] += a * xp[i * incx];
}

tdb::ManagedTensor scaled_copy(float a, tdb::TensorView x) {
  x.set_name("x");
  tdb::check_device(x, kDLCPU);
  tdb::check_dtype(x, tdb::kFloat32);
  // contiguous, x's shape and device, torch's allocator
  tdb::ManagedTensor out = tdb::allocate_like(x);
  void* stream = launch_stream(x);
  (void)stream;
  const float* xp = x.data<float>();
  float* op = tdb::data_ptr<float>(out.dl());
  tdb::for_each_offset(x.dl(), [&](int64_t i, int64_t off) { op[i] = a * xp[off]; });
  return out;
}

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "The axpy_compile kernels, torch-free; call them through axpy_compile "
            "(custom ops under compile).";
  m.def("axpy_", &axpy_, pybind11::arg("a"), pybind11::arg("x"), pybind11::arg("y"),
        "y = a*x + y in place (1-D float32 CPU; x any stride, y contiguous).");
  m.def("scaled_copy", &scaled_copy, pybind11::arg("a"), pybind11::arg("x"),
        "New contiguous float32 tensor a*x, allocated by x's producer.");
  // A refused call's TypeError says why (after the last def): a FakeTensor gets the
  // custom-op route.
  tdb::explain_refusals(m);
}
