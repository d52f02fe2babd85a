#include "engine/cuda/device_buffer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"

namespace scored::cuda {

DeviceBuffer::~DeviceBuffer() {
  // A free can only fail once the context is already broken; nothing useful can be done about it here.
  if (ptr_ != nullptr) static_cast<void>(cudaFree(ptr_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) static_cast<void>(cudaFree(ptr_));
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int64_t bytes, const std::string& what) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative size for ", what));
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, static_cast<size_t>(bytes));
  if (err == cudaErrorMemoryAllocation) {
    static_cast<void>(cudaGetLastError());  // out-of-memory is not sticky: clear it
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of GPU memory for ", what));
  }
  SCORED_CUDA_CHECK(err);
  buffer.ptr_ = ptr;
  buffer.bytes_ = bytes;
  return buffer;
}

absl::StatusOr<DeviceBuffer> UploadToDevice(const void* host, int64_t bytes, const std::string& what) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(bytes, what);
  if (!buffer.ok() || bytes == 0) return buffer;
  SCORED_CUDA_CHECK(cudaMemcpy(buffer->data(), host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
  return buffer;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
}

CudaStream::CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

absl::StatusOr<CudaStream> CudaStream::Create() {
  CudaStream stream;
  SCORED_CUDA_CHECK(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking));
  return stream;
}

absl::StatusOr<CudaStream> CudaStream::CreateHighestPriority() {
  int least = 0, greatest = 0;
  SCORED_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CudaStream stream;
  SCORED_CUDA_CHECK(cudaStreamCreateWithPriority(&stream.stream_, cudaStreamNonBlocking, greatest));
  return stream;
}

absl::Status CudaStream::Synchronize() const {
  SCORED_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

absl::StatusOr<CudaEvent> CudaEvent::Create() {
  CudaEvent event;
  SCORED_CUDA_CHECK(cudaEventCreateWithFlags(&event.event_, cudaEventDisableTiming));
  return event;
}

bool IsStickyCudaError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

}  // namespace scored::cuda
