#include <vector>

#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

cudaError_t launch_axpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream);
std::vector<int64_t> compiled_archs();

torch::Tensor axpy(const torch::Tensor& x, const torch::Tensor& y, double a) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "axpy: x and y must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32, "axpy: float32 only");
  TORCH_CHECK(x.numel() == y.numel(), "axpy: x and y differ in size");
  auto xc = x.contiguous();
  auto out = y.contiguous().clone();
  const cudaError_t err = launch_axpy(xc.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(a), out.numel(),
                                      at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "axpy: ", cudaGetErrorString(err));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("axpy", &axpy, "a * x + y, computed by a CUDA kernel");
  m.def("compiled_archs", &compiled_archs, "the SM archs nvcc compiled the kernel for");
}
