// bench_torch_ext: a pybind11 torch extension taking torch::Tensor (what most kernel authors write),
// compiled by torch.utils.cpp_extension.load for benchmarks/bindings.py. f0(), f1(x), f3(x, y, z), f8(a..h)
// read each data pointer. checked8(a..h) (issue 26) also checks each is float32, 1-D, contiguous and on the CPU,
// as a torch extension's author writes it (TORCH_CHECK).
#include <c10/core/CPUAllocator.h>
#include <torch/extension.h>

#include <cstdint>

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }
uintptr_t checked(const torch::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "expected float32");
  TORCH_CHECK(t.dim() == 1, "expected 1-D");
  TORCH_CHECK(t.is_contiguous(), "expected contiguous");
  TORCH_CHECK(t.device().is_cpu(), "expected a CPU tensor");
  return addr(t);
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // Returning one new tensor like x, as a torch extension does.
  m.def("new1", [](const torch::Tensor& x) { return torch::empty(x.sizes(), x.options()); });
  // The floor of returning any new torch.Tensor: a fresh TensorImpl over x's storage (no allocation, no
  // dispatcher), wrapped in a new Python object and freed again, as every new1 above does.
  m.def("floor1", [](const torch::Tensor& x) {
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(x.storage()), x.key_set(), x.dtype());
    t.unsafeGetTensorImpl()->set_sizes_contiguous(x.sizes());
    return t;
  });
  // The floor of returning a new tensor allocated by torch's CPU allocator (what every table's allocator must
  // call): floor1 plus a fresh storage, with neither the dispatcher nor a table in between.
  m.def("alloc1", [](const torch::Tensor& x) {
    c10::Storage storage(c10::Storage::use_byte_size_t(), x.nbytes(), c10::GetCPUAllocator(), /*resizable=*/false);
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), x.key_set(), x.dtype());
    t.unsafeGetTensorImpl()->set_sizes_contiguous(x.sizes());
    return t;
  });
  m.def("f0", []() {});
  m.def("f1", [](const torch::Tensor& x) { g_sink = addr(x); });
  m.def("f3", [](const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
  using T = const torch::Tensor&;
  m.def("f8", [](T a, T b, T c, T d, T e, T f, T g, T h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  m.def("checked8", [](T a, T b, T c, T d, T e, T f, T g, T h) {
    g_sink = checked(a) + checked(b) + checked(c) + checked(d) + checked(e) + checked(f) + checked(g) + checked(h);
  });
}
