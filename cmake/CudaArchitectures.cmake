# Which GPU generations the CUDA build carries (included by the top-level CMakeLists.txt before CUDA is
# enabled).
#
# Default: sm_90a only (90a-real): CI and the GPU test bundles build this (2 build cores, 64 MiB bundles),
# and it is the only target that has the Hopper kernels (wgmma attention, the CUTLASS SM90 int8 GEMM).
#
# -DSCORED_CUDA_RELEASE_ARCHS=ON: the release list, one binary for every supported generation:
#   80-real   Ampere (A100; its cubin also runs on 8.6 / 8.7 devices: A10, A40, RTX 30, Orin)
#   89-real   Ada (L4, L40S, RTX 40; its cubin runs on nothing else, but nvcc schedules for it)
#   90a-real  Hopper (H100, H200, GH200): the only target with the wgmma and CUTLASS SM90 kernels
#   100-real  Blackwell datacenter (B200, GB200; the cubin also runs on 10.3: B300, GB300)
#   110-real  Blackwell Thor
#   120-real  Blackwell RTX (RTX 50, RTX PRO; the cubin also runs on 12.1: DGX Spark)
#   80-virtual  compute_80 PTX, JIT-compiled by the driver for any later device with no cubin above
#               (the portable path; CUDA_FORCE_PTX_JIT=1 runs it on any device to test it)
# The kernels pick their path per device at run time: the Hopper kernels are chosen only when the loaded
# code of their own module is the sm_90a cubin and the device is compute capability 9.0
# (attention_internal::WgmmaAvailable, kernels::Int8GemmSupported), FP8 GEMMs only where cuBLASLt's
# probe plans run (GemmRunner::Fp8Supported); everything else falls back to the portable kernels
# (mma.sync attention, dequantize + cuBLASLt bf16 GEMMs). An explicit -DCMAKE_CUDA_ARCHITECTURES=...
# wins over both.
option(SCORED_CUDA_RELEASE_ARCHS
       "Build CUDA code for sm_80, sm_89, sm_90a, sm_100, sm_110, sm_120 plus compute_80 PTX (release)" OFF)
set(SCORED_CUDA_RELEASE_ARCH_LIST 80-real 89-real 90a-real 100-real 110-real 120-real 80-virtual)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  if(SCORED_CUDA_RELEASE_ARCHS)
    set(CMAKE_CUDA_ARCHITECTURES ${SCORED_CUDA_RELEASE_ARCH_LIST})
  else()
    set(CMAKE_CUDA_ARCHITECTURES 90a-real)
  endif()
endif()
message(STATUS "scored: CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
