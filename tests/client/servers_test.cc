// The --server list of the clients (client/connect/servers.h): comma lists, dns:/// names (numeric ones,
// which resolve offline), the refusals, and the same-model check naming the differing server and field.
#include "client/connect/servers.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ResolveServersTest, OneServerIsKeptAsGiven) {
  auto s = ResolveServers("scored.example:50051");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre("scored.example:50051"));  // gRPC resolves it, as before
}

TEST(ResolveServersTest, CommaListInOrderWithoutDuplicates) {
  auto s = ResolveServers("10.0.0.7:50051, 10.0.0.6:50051,10.0.0.7:50051,[::1]:9");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre("10.0.0.7:50051", "10.0.0.6:50051", "[::1]:9"));
}

TEST(ResolveServersTest, DnsNamesResolveToEveryAddress) {
  auto s = ResolveServers("dns:///127.0.0.1:7001,dns:///[::1]:7002,127.0.0.1:7001");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre("127.0.0.1:7001", "[::1]:7002"));
}

TEST(ResolveServersTest, RefusesWhatIsNotHostPort) {
  for (const char* bad : {"", "a:1,,b:2", "nohost", "a:", ":50051", "a:port", "dns:///noport", "dns:///"}) {
    auto s = ResolveServers(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ResolveServers("a:1,b").status().message(), HasSubstr("'b' is not host:port"));
  // A URL (the OpenAI endpoint's, say) is refused at once, saying what to give instead.
  for (const char* url : {"http://127.0.0.1:50051", "a:1,https://b:443/v1"}) {
    auto s = ResolveServers(url);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(s.status().message(), HasSubstr("give HOST:PORT, without http")) << url;
  }
}

scored::v1::ModelInfo Info() {
  scored::v1::ModelInfo i;
  i.set_model_fingerprint("m1");
  i.set_tokenizer_fingerprint("t1");
  i.mutable_reference()->set_model_fingerprint("r1");
  i.set_compute_dtype("bf16");
  i.set_format("w4a16-g128+kv-fp8");
  i.set_backend("cuda");
  i.set_tp(1);
  i.set_vocab_size(128256);
  i.set_bos_id(1);
  i.set_eos_id(2);
  i.set_model_path("/models/a");  // where each server found it may differ
  i.set_max_seq_len(4096);        // limits may differ (windows are checked against each)
  return i;
}

TEST(CheckSameModelTest, SameComputationPasses) {
  scored::v1::ModelInfo other = Info();
  other.set_model_path("/mnt/b");
  other.set_max_seq_len(8192);
  EXPECT_TRUE(CheckSameModel({"a:1", "b:2"}, {Info(), other}).ok());
  EXPECT_TRUE(CheckSameModel({"a:1"}, {Info()}).ok());
}

TEST(CheckSameModelTest, NamesTheServerAndTheField) {
  struct Case {
    void (*change)(scored::v1::ModelInfo*);
    const char* field;
  };
  const Case cases[] = {
      {[](scored::v1::ModelInfo* i) { i->set_model_fingerprint("m2"); }, "model_fingerprint: 'm2' vs 'm1'"},
      {[](scored::v1::ModelInfo* i) { i->set_tokenizer_fingerprint("t2"); }, "tokenizer_fingerprint"},
      {[](scored::v1::ModelInfo* i) { i->mutable_reference()->set_model_fingerprint("r2"); },
       "reference.model_fingerprint"},
      {[](scored::v1::ModelInfo* i) { i->clear_reference(); }, "reference.model_fingerprint: '' vs 'r1'"},
      {[](scored::v1::ModelInfo* i) { i->set_compute_dtype("fp32"); }, "compute_dtype: 'fp32' vs 'bf16'"},
      {[](scored::v1::ModelInfo* i) { i->set_format("w4a16-g128+kv-fp8-ignored"); },
       "format (weights and KV-cache mode)"},
      {[](scored::v1::ModelInfo* i) { i->set_backend("cpu"); }, "backend"},
      {[](scored::v1::ModelInfo* i) { i->set_tp(2); }, "tp: '2' vs '1'"},
      {[](scored::v1::ModelInfo* i) { i->set_vocab_size(32000); }, "vocab_size"},
      {[](scored::v1::ModelInfo* i) { i->set_bos_id(0); }, "bos_id / eos_id / add_bos_by_default"},
  };
  for (const Case& c : cases) {
    scored::v1::ModelInfo third = Info();
    c.change(&third);
    const absl::Status s = CheckSameModel({"a:1", "b:2", "c:3"}, {Info(), Info(), third});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(std::string("server c:3 differs from a:1 in ") + c.field));
  }
}

}  // namespace
}  // namespace client
}  // namespace scored
