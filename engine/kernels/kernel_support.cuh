// Helpers shared by the tensor-core kernel files (private: included only by .cu files): the attention
// kernels (attention_common.cuh), the grouped expert GEMMs and the CUTLASS SM90 kernels.
//
// - EnsureDynamicSmem (host): raises a kernel's dynamic shared-memory limit once per (kernel, device).
// - ModuleIsSm90a (host): whether the device runs a file's sm_90a cubin (see below); DeviceIsSm90 (host):
//   whether a device is compute capability 9.0 (what every sm_90a kernel also needs).
// - PTX wrappers: shared-memory addresses, cp.async 16- and 4-byte copies and their groups, ldmatrix
// (.trans).
#ifndef SCORED_ENGINE_KERNELS_KERNEL_SUPPORT_CUH_
#define SCORED_ENGINE_KERNELS_KERNEL_SUPPORT_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

namespace scored::kernels {

// Raises a kernel's dynamic shared-memory limit once per (kernel, device): the attribute belongs to the
// kernel's instance in one device's context, so a process that runs ranks on several GPUs must set it on
// each of them. Kept out of the launch path after the first call (and out of graph captures).
inline cudaError_t EnsureDynamicSmem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, device}) > 0) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.insert({kernel, device});
  return err;
}

// Whether the current device loaded the sm_90a cubin of the module that holds `probe` (an empty kernel
// of the caller's .cu file): CUTLASS's SM90 kernels do work only there; in another target's cubin, or in
// PTX JIT-compiled for the device (a release build under CUDA_FORCE_PTX_JIT=1), they are empty. Same module,
// so the probe's versions are theirs. Callers cache the answer.
inline bool ModuleIsSm90a(const void* probe) {
  cudaFuncAttributes attributes;
  const bool ok = cudaFuncGetAttributes(&attributes, probe) == cudaSuccess;
  if (!ok) cudaGetLastError();
  return ok && attributes.binaryVersion == 90 && attributes.ptxVersion >= 90;
}

// Whether `device` is compute capability 9.0 (false, the error cleared, where it cannot be asked).
inline bool DeviceIsSm90(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes == 0 writes zeros (rows past a sequence's or an expert's end).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)), "l"(src),
               "r"(src_bytes));
}
// 4-byte global -> shared copy (cp.async.ca: the 4-byte form must go through L1).
__device__ __forceinline__ void CopyAsync4(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SharedAddress(dst)), "l"(src));
}
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LoadMatrixX4(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_KERNEL_SUPPORT_CUH_
