// WeightStream (engine/cuda/weight_stream.h): the order contract on the CPU (a model of resident dense
// linears enqueues no GPU work), and on a GPU the quantized path: every acquired weight is bitwise the
// linear's own Materialize output, and the two scratch buffers alternate.
#include "engine/cuda/weight_stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
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

class WeightStreamTest : public GpuTest {};

// A W4A16 checkpoint: every linear is dequantized into the scratch buffers. Acquired in the forward's pattern
// (two at a time, q|k|v + o then gate|up + down), each weight is read back before its release and compared
// with a Materialize of the same linear into a buffer of its own.
TEST_F(WeightStreamTest, QuantizedWeightsMatchMaterializeAndAlternate) {
  for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    SCOPED_TRACE(dtype == ComputeDtype::kBf16 ? "bf16" : "fp32");
    auto weights = ModelWeights::Load(FixtureDir("stories260k-w4a16-channel"));
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto model = UploadModel(**weights, dtype);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_GT((*model)->max_scratch_elements, 0);
    const int64_t elem = dtype == ComputeDtype::kBf16 ? 2 : 4;
    const int64_t scratch_bytes = (*model)->max_scratch_elements * elem;
    auto buf0 = DeviceBuffer::Allocate(scratch_bytes, "scratch 0");
    auto buf1 = DeviceBuffer::Allocate(scratch_bytes, "scratch 1");
    auto got = DeviceBuffer::Allocate(scratch_bytes, "acquired copy");
    auto want = DeviceBuffer::Allocate(scratch_bytes, "materialized");
    auto dequant = CudaStream::Create();
    auto stream = CudaStream::Create();
    ASSERT_TRUE(buf0.ok() && buf1.ok() && got.ok() && want.ok() && dequant.ok() && stream.ok());
    CudaEvent events[4];
    for (CudaEvent& e : events) {
      auto created = CudaEvent::Create();
      ASSERT_TRUE(created.ok()) << created.status();
      e = *std::move(created);
    }
    WeightScratch scratch;
    scratch.buffer[0] = buf0->data();
    scratch.buffer[1] = buf1->data();
    scratch.dequant_stream = dequant->get();
    scratch.ready[0] = events[0].get();
    scratch.ready[1] = events[1].get();
    scratch.free[0] = events[2].get();
    scratch.free[1] = events[3].get();
    // Poison both buffers: a weight read before its expansion would not match.
    ASSERT_EQ(cudaMemset(buf0->data(), 0xff, scratch_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(buf1->data(), 0xff, scratch_bytes), cudaSuccess);

    WeightStream ws(**model, scratch, stream->get());
    ASSERT_TRUE(ws.Start().ok());
    const std::vector<const DeviceLinear*> order = WeightStream::Order(**model);
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
        ASSERT_EQ(cudaMemcpyAsync(got->data(), lease->weight, bytes, cudaMemcpyDeviceToDevice, stream->get()),
                  cudaSuccess);
        ASSERT_TRUE(linear.Materialize(dtype, want->data(), stream->get()).ok());
        ASSERT_TRUE(stream->Synchronize().ok());
        std::vector<uint8_t> a(bytes), b(bytes);
        ASSERT_EQ(cudaMemcpy(a.data(), got->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(b.data(), want->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(a, b);
      }
      ASSERT_TRUE(ws.Release(*first).ok());
      ASSERT_TRUE(ws.Release(*second).ok());
    }
    EXPECT_EQ(ws.Acquire(*order[0]).status().code(), absl::StatusCode::kInternal);
    ASSERT_TRUE(dequant->Synchronize().ok());
  }
}

}  // namespace
}  // namespace scored::cuda
