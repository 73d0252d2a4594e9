# A small real torch CUDA extension: one kernel (.cu, kept free of torch headers so nvcc is quick)
# and its binding (.cpp). Built by verlenv's builder in the tests.
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

# nvcc compiles the archs of one file in parallel, as flash-attn's NVCC_THREADS does.
nvcc_threads = os.environ.get("NVCC_THREADS", "1")

setup(
    name="cuda-ext-probe",
    version="0.1",
    ext_modules=[
        CUDAExtension(
            "cuda_ext_probe",
            ["probe.cpp", "probe_kernel.cu"],
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2", f"--threads={nvcc_threads}"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
