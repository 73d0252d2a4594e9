#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

__global__ void axpy_kernel(const float* x, float* y, float a, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

cudaError_t launch_axpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  axpy_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, y, a, n);
  return cudaGetLastError();
}

// nvcc defines __CUDA_ARCH_LIST__ (e.g. 800,900) from its -gencode options, in host code too.
std::vector<int64_t> compiled_archs() { return {__CUDA_ARCH_LIST__}; }
