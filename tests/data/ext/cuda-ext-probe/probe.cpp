// The binding, as vLLM's _C binds its kernels: ops registered with torch's dispatcher (torch/library.h) and a module
// that only loads them. torch/extension.h (pybind11 and all of ATen) took 40 s of g++ on the test machine for this
// one file; these headers take 10 s, and the .so still links torch's libraries and needs its symbols.
#include <Python.h>

#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

cudaError_t launch_axpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream);
std::vector<int64_t> compiled_archs();

at::Tensor axpy(const at::Tensor& x, const at::Tensor& y, double a) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "axpy: x and y must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat, "axpy: float32 only");
  TORCH_CHECK(x.numel() == y.numel(), "axpy: x and y differ in size");
  auto xc = x.contiguous();
  auto out = y.contiguous().clone();
  const cudaError_t err = launch_axpy(xc.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(a), out.numel(),
                                      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "axpy: ", cudaGetErrorString(err));
  return out;
}

// One kernel for every device (a catch-all): on CPU tensors the binding's own check answers, not the dispatcher.
TORCH_LIBRARY(cuda_ext_probe, m) {
  m.def("axpy(Tensor x, Tensor y, float a) -> Tensor", &axpy);
  m.def("compiled_archs() -> int[]", &compiled_archs);
}

// `import cuda_ext_probe` loads the .so, which registers the ops: torch.ops.cuda_ext_probe.axpy(x, y, 2.0).
static struct PyModuleDef probe_module = {PyModuleDef_HEAD_INIT, "cuda_ext_probe", "torch.ops.cuda_ext_probe", -1,
                                          nullptr};
PyMODINIT_FUNC PyInit_cuda_ext_probe() { return PyModule_Create(&probe_module); }
