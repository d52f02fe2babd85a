// Device memory owned by RAII handles, and the stream the engine runs on.
//
// DeviceBuffer: one cudaMalloc'd block (never managed memory), freed on destruction; move-only. Its bytes are
// uninitialized. CudaStream: one non-blocking stream, destroyed on destruction; move-only. CudaEvent
// likewise. Thread-safety: none; an engine uses its buffers from the one thread that calls Score().
#ifndef SCORED_ENGINE_CUDA_DEVICE_BUFFER_H_
#define SCORED_ENGINE_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace scored::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // bytes >= 0 (0 gives an empty buffer with data() == nullptr). RESOURCE_EXHAUSTED naming `what` and the
  // size when the device cannot give it.
  static absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes, const std::string& what);

  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Allocates a buffer and fills it from host memory (synchronous copy).
absl::StatusOr<DeviceBuffer> UploadToDevice(const void* host, int64_t bytes, const std::string& what);

class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  static absl::StatusOr<CudaStream> Create();
  // A non-blocking stream at the device's greatest priority: its kernels' blocks are scheduled before those
  // of default-priority streams as SMs free up (e.g. all-reduces overlapping a GEMM).
  static absl::StatusOr<CudaStream> CreateHighestPriority();
  cudaStream_t get() const { return stream_; }
  absl::Status Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// One cudaEvent_t without timing (for ordering work between streams), destroyed on destruction; move-only.
class CudaEvent {
 public:
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  static absl::StatusOr<CudaEvent> Create();
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Whether `err` leaves the CUDA context unusable for the rest of the process (illegal address, launch
// failure, ECC, ...).
bool IsStickyCudaError(cudaError_t err);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_DEVICE_BUFFER_H_
