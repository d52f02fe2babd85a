// WeightStream (engine/cuda/weight_stream.h): the order contract on the CPU (a model of resident dense
// linears enqueues no GPU work), and on a GPU, in the buffers AllocateActivations makes: every acquired
// quantized weight is bitwise the linear's own Materialize output, the two scratch buffers alternate, and
// FP8-resident linears lease no weight.
#include "engine/cuda/weight_stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/model/weights.h"
#include "tests/engine/cuda/gpu_fixture.h"

namespace scored::cuda {
namespace {

using ::scored::testing::GpuTest;

std::string FixtureDir(const std::string& name) {
  const char* env = std::getenv("SCORED_FIXTURES_DIR");
  return std::string(env != nullptr ? env : SCORED_FIXTURES_DIR) + "/" + name;
}

// Two layers of default (resident dense, empty) linears: no scratch, nothing enqueued.
DeviceModel DenseModel() {
  DeviceModel model;
  model.layers.resize(2);
  return model;
}

TEST(WeightStreamOrderTest, LayerByLayerQkvOGateUpDown) {
  const DeviceModel model = DenseModel();
  const std::vector<const DeviceLinear*> order = WeightStream::Order(model);
  ASSERT_EQ(order.size(), 8u);
  for (size_t l = 0; l < 2; ++l) {
    const DeviceLayer& layer = model.layers[l];
    EXPECT_EQ(order[4 * l + 0], &layer.qkv);
    EXPECT_EQ(order[4 * l + 1], &layer.o);
    EXPECT_EQ(order[4 * l + 2], &layer.gate_up);
    EXPECT_EQ(order[4 * l + 3], &layer.down);
  }
}

TEST(WeightStreamOrderTest, AcquiresInOrderAndRefusesOutOfOrder) {
  const DeviceModel model = DenseModel();
  WeightStream stream(model, WeightScratch(), nullptr);
  ASSERT_TRUE(stream.Start().ok());
  // q|k|v, then o before q|k|v's release (the forward holds two at a time).
  auto qkv = stream.Acquire(model.layers[0].qkv);
  ASSERT_TRUE(qkv.ok()) << qkv.status();
  EXPECT_EQ(qkv->index, 0u);
  EXPECT_EQ(qkv->linear, &model.layers[0].qkv);
  // Skipping o is an error, and so is acquiring q|k|v again.
  EXPECT_EQ(stream.Acquire(model.layers[0].gate_up).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(stream.Acquire(model.layers[0].qkv).status().code(), absl::StatusCode::kInternal);
  auto o = stream.Acquire(model.layers[0].o);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->index, 1u);
  EXPECT_TRUE(stream.Release(*qkv).ok());
  EXPECT_TRUE(stream.Release(*o).ok());
  for (size_t k = 2; k < 8; ++k) {
    auto lease = stream.Acquire(*WeightStream::Order(model)[k]);
    ASSERT_TRUE(lease.ok()) << k << ": " << lease.status();
    EXPECT_EQ(lease->index, k);
    EXPECT_TRUE(stream.Release(*lease).ok());
  }
  // Past the last linear.
  EXPECT_EQ(stream.Acquire(model.layers[0].qkv).status().code(), absl::StatusCode::kInternal);
}

class WeightStreamTest : public GpuTest {
 protected:
  // Loads fixture `name` for `dtype` with its activations (the scratch buffers, dequant stream and events).
  void Load(const std::string& name, ComputeDtype dtype) {
    auto weights = ModelWeights::Load(FixtureDir(name));
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto model = UploadModel(**weights, dtype);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto acts = AllocateActivations((*weights)->config(), *model_, 16);
    ASSERT_TRUE(acts.ok()) << acts.status();
    acts_ = *std::move(acts);
    auto stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
  }

  std::unique_ptr<DeviceModel> model_;
  Activations acts_;
  CudaStream stream_;
};

// A W4A16 checkpoint: every layer linear is dequantized into the scratch buffers. Acquired in the forward's
// pattern (two at a time, q|k|v + o then gate|up + down), each weight is read back before its release and
// compared with a Materialize of the same linear into a buffer of its own.
TEST_F(WeightStreamTest, QuantizedWeightsMatchMaterializeAndAlternate) {
  for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    SCOPED_TRACE(dtype == ComputeDtype::kBf16 ? "bf16" : "fp32");
    ASSERT_NO_FATAL_FAILURE(Load("stories260k-w4a16-channel", dtype));
    ASSERT_GT(model_->max_scratch_elements, 0);
    const int64_t elem = dtype == ComputeDtype::kBf16 ? 2 : 4;
    const int64_t scratch_bytes = model_->max_scratch_elements * elem;
    auto got = DeviceBuffer::Allocate(scratch_bytes, "acquired copy");
    auto want = DeviceBuffer::Allocate(scratch_bytes, "materialized");
    ASSERT_TRUE(got.ok() && want.ok());
    const WeightScratch scratch = acts_.weight_scratch();
    // Poison both buffers: a weight read before its expansion would not match.
    ASSERT_EQ(cudaMemset(scratch.buffer[0], 0xff, scratch_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(scratch.buffer[1], 0xff, scratch_bytes), cudaSuccess);

    WeightStream ws(*model_, scratch, stream_.get());
    ASSERT_TRUE(ws.Start().ok());
    const std::vector<const DeviceLinear*> order = WeightStream::Order(*model_);
    ASSERT_EQ(order.size() % 2, 0u);
    for (size_t k = 0; k < order.size(); k += 2) {
      auto first = ws.Acquire(*order[k]);
      auto second = ws.Acquire(*order[k + 1]);
      ASSERT_TRUE(first.ok()) << first.status();
      ASSERT_TRUE(second.ok()) << second.status();
      for (const WeightStream::Lease* lease : {&*first, &*second}) {
        SCOPED_TRACE(lease->index);
        const DeviceLinear& linear = *lease->linear;
        ASSERT_TRUE(linear.uses_scratch());
        EXPECT_EQ(lease->weight, scratch.buffer[lease->index % 2]);  // the buffers alternate
        const int64_t bytes = linear.out_features() * linear.in_features() * elem;
        ASSERT_EQ(cudaMemcpyAsync(got->data(), lease->weight, bytes, cudaMemcpyDeviceToDevice, stream_.get()),
                  cudaSuccess);
        ASSERT_TRUE(linear.Materialize(dtype, want->data(), stream_.get()).ok());
        ASSERT_TRUE(stream_.Synchronize().ok());
        std::vector<uint8_t> a(bytes), b(bytes);
        ASSERT_EQ(cudaMemcpy(a.data(), got->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(b.data(), want->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(a, b);
      }
      ASSERT_TRUE(ws.Release(*first).ok());
      ASSERT_TRUE(ws.Release(*second).ok());
    }
    EXPECT_EQ(ws.Acquire(*order[0]).status().code(), absl::StatusCode::kInternal);
    ASSERT_TRUE(acts_.dequant_stream.Synchronize().ok());
  }
}

// W8A8 in bf16 mode where cuBLASLt runs FP8 GEMMs: the linears stay resident in FP8 and lease no weight
// (their GEMMs read fp8_weight()); any other linear leases its resident or dequantized matrix.
TEST_F(WeightStreamTest, Fp8ResidentLinearsLeaseNoWeight) {
  if (!GemmRunner::Fp8Supported(GemmTypes::kFp8ToBf16)) GTEST_SKIP() << "no FP8 GEMMs on this device";
  ASSERT_NO_FATAL_FAILURE(Load("stories260k-fp8-dynamic", ComputeDtype::kBf16));
  WeightStream ws(*model_, acts_.weight_scratch(), stream_.get());
  ASSERT_TRUE(ws.Start().ok());
  int fp8 = 0;
  for (const DeviceLinear* linear : WeightStream::Order(*model_)) {
    auto lease = ws.Acquire(*linear);
    ASSERT_TRUE(lease.ok()) << lease.status();
    if (linear->fp8_resident()) {
      ++fp8;
      EXPECT_EQ(lease->weight, nullptr);
    } else {
      EXPECT_NE(lease->weight, nullptr);
    }
    ASSERT_TRUE(ws.Release(*lease).ok());
  }
  EXPECT_GT(fp8, 0);
  ASSERT_TRUE(stream_.Synchronize().ok());
}

}  // namespace
}  // namespace scored::cuda
