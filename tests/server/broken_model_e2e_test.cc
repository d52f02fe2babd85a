// End to end: the real `scored` daemon (CPU backend) must refuse a broken model folder at load time,
// exiting with a non-zero code (not a signal) and a message that names what is wrong: the file, the
// tensor, the config field or the unsupported feature. Each test copies stories260K-hf into a fresh
// temporary folder and breaks exactly one thing.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scored/v1/scorer.grpc.pb.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Loading the 260K-parameter model takes well under a second; a daemon still running after this long
// has not refused the model (it is serving or hung), which fails the test.
constexpr std::chrono::seconds kExitTimeout(60);

constexpr char kModelFile[] = "model.safetensors";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A parsed safetensors file: the JSON header and the data section that follows it.
struct Safetensors {
  nlohmann::json header;
  std::string data;
  int64_t header_size = 0;  // bytes of JSON after the 8-byte length prefix
};

Safetensors ParseSafetensors(const std::string& bytes) {
  Safetensors st;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  st.header_size = static_cast<int64_t>(n);
  st.header = nlohmann::json::parse(bytes.substr(8, static_cast<size_t>(n)));
  st.data = bytes.substr(8 + static_cast<size_t>(n));
  return st;
}

std::string SerializeSafetensors(const nlohmann::json& header, const std::string& data) {
  std::string json = header.dump();
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

// One tensor of a rebuilt file: dtype, shape and raw little-endian bytes.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The file's tensors with `replace` applied (a tensor named there is replaced or added), in the original
// order, the data section rebuilt.
std::string RebuildSafetensors(const Safetensors& st, const std::map<std::string, RawTensor>& replace) {
  std::vector<std::pair<int64_t, std::string>> by_offset;
  for (const auto& [name, info] : st.header.items()) {
    if (name != "__metadata__") by_offset.emplace_back(info["data_offsets"][0].get<int64_t>(), name);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (const auto& [name, t] : replace) {
    if (!st.header.contains(name)) by_offset.emplace_back(INT64_MAX, name);
  }
  nlohmann::json header;
  if (st.header.contains("__metadata__")) header["__metadata__"] = st.header["__metadata__"];
  std::string data;
  for (const auto& [begin, name] : by_offset) {
    const int64_t new_begin = static_cast<int64_t>(data.size());
    auto it = replace.find(name);
    if (it != replace.end()) {
      data += it->second.bytes;
      header[name] = {{"dtype", it->second.dtype}, {"shape", it->second.shape}};
    } else {
      const int64_t end = st.header[name]["data_offsets"][1].get<int64_t>();
      data += st.data.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
      header[name] = st.header[name];
    }
    header[name]["data_offsets"] = {new_begin, static_cast<int64_t>(data.size())};
  }
  return SerializeSafetensors(header, data);
}

// The F32 values of one tensor of the file.
std::vector<float> TensorFloats(const Safetensors& st, const std::string& name) {
  const int64_t begin = st.header[name]["data_offsets"][0].get<int64_t>();
  const int64_t end = st.header[name]["data_offsets"][1].get<int64_t>();
  std::vector<float> v(static_cast<size_t>(end - begin) / sizeof(float));
  std::memcpy(v.data(), st.data.data() + begin, v.size() * sizeof(float));
  return v;
}

struct RunResult {
  bool exited = false;     // exited normally (not killed by a signal, not timed out)
  int exit_code = -1;      // valid when exited
  int signal_number = 0;   // non-zero when a signal ended it
  bool timed_out = false;  // still running after kExitTimeout (then killed)
  std::string output;      // stdout + stderr
};

// Runs `scored --model DIR --backend=cpu --listen=127.0.0.1:0 --metrics_listen=` with a timeout.
RunResult RunScored(const fs::path& model_dir, const fs::path& log_path) {
  RunResult result;
  const std::string binary = scored::testing::DefaultScoredBinary();
  std::vector<std::string> args = {
      binary, "--model", model_dir.string(), "--backend=cpu", "--listen=127.0.0.1:0", "--metrics_listen="};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    FILE* log = std::freopen(log_path.c_str(), "w", stdout);
    if (log == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(126);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + kExitTimeout;
  int wstatus = 0;
  while (true) {
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.output = ReadFile(log_path);
  if (result.timed_out) return result;
  if (WIFEXITED(wstatus)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.signal_number = WTERMSIG(wstatus);
  }
  return result;
}

class BrokenModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/scored_broken_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    tmp_dir_ = templ;
    model_dir_ = tmp_dir_ / "model";
    fs::copy(scored::testing::StoriesModelDir(), model_dir_, fs::copy_options::recursive);
    ASSERT_TRUE(fs::exists(model_dir_ / kModelFile));
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_dir_, ec);
  }

  fs::path Model(const std::string& name) const { return model_dir_ / name; }

  // Runs the daemon on the broken folder and checks it refused it cleanly; returns its output.
  std::string ExpectLoadFailure() {
    const RunResult r = RunScored(model_dir_, tmp_dir_ / "scored.log");
    EXPECT_FALSE(r.timed_out) << "scored still running after the timeout; output:\n" << r.output;
    EXPECT_EQ(r.signal_number, 0) << "scored crashed (signal " << r.signal_number << "); output:\n"
                                  << r.output;
    EXPECT_TRUE(r.exited) << r.output;
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 127) << "could not exec " << scored::testing::DefaultScoredBinary();
    return r.output;
  }

  nlohmann::json ReadConfig() const { return nlohmann::json::parse(ReadFile(Model("config.json"))); }
  void WriteConfig(const nlohmann::json& config) { WriteFile(Model("config.json"), config.dump(2)); }

  fs::path tmp_dir_;
  fs::path model_dir_;
};

TEST_F(BrokenModelTest, IntactCopyIsNotRefused) {
  // Control: the unmodified copy is accepted, so the failures below come from the one broken thing.
  scored::testing::ScoredProcessOptions opts;
  opts.args = {"--model=" + model_dir_.string(), "--backend=cpu"};
  auto proc = scored::testing::ScoredProcess::Start(opts);
  ASSERT_TRUE(proc.ok()) << proc.status();
}

// stories260K's config says max_position_embeddings 512: --max_seq_len 513 is served (the last id is only a
// target), 2049 is refused before serving, naming the flag that allows it, which then does.
TEST_F(BrokenModelTest, MaxSeqLenPastTheTrainedContext) {
  scored::testing::ScoredProcessOptions opts;
  opts.args = {"--model=" + model_dir_.string(), "--backend=cpu", "--max_seq_len=2049"};
  auto refused = scored::testing::ScoredProcess::Start(opts);
  ASSERT_FALSE(refused.ok());
  for (const char* part : {"--max_seq_len 2049", "max_position_embeddings 512", "--allow_long_context"}) {
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << part << " in " << refused.status();
  }
  opts.args.back() = "--max_seq_len=513";
  auto one_more = scored::testing::ScoredProcess::Start(opts);
  ASSERT_TRUE(one_more.ok()) << one_more.status();
  EXPECT_NE((*one_more)->ReadLog().find("max_seq_len 513"), std::string::npos) << (*one_more)->ReadLog();
  opts.args = {"--model=" + model_dir_.string(), "--backend=cpu", "--max_seq_len=2049",
               "--allow_long_context"};
  auto allowed = scored::testing::ScoredProcess::Start(opts);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_NE((*allowed)->ReadLog().find("max_seq_len 2049"), std::string::npos) << (*allowed)->ReadLog();
}

TEST_F(BrokenModelTest, SafetensorsTruncatedInDataSection) {
  const std::string bytes = ReadFile(Model(kModelFile));
  const Safetensors st = ParseSafetensors(bytes);
  WriteFile(Model(kModelFile), bytes.substr(0, static_cast<size_t>(8 + st.header_size) + st.data.size() / 2));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kModelFile).string()));
  EXPECT_THAT(output, HasSubstr("data section"));
}

TEST_F(BrokenModelTest, SafetensorsTruncatedInsideHeader) {
  const std::string bytes = ReadFile(Model(kModelFile));
  const Safetensors st = ParseSafetensors(bytes);
  WriteFile(Model(kModelFile), bytes.substr(0, static_cast<size_t>(8 + st.header_size / 2)));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kModelFile).string()));
  EXPECT_THAT(output, HasSubstr("header length"));
}

TEST_F(BrokenModelTest, TensorShapeInconsistentWithItsBytes) {
  Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  st.header["model.layers.1.self_attn.q_proj.weight"]["shape"] = {64, 63};
  WriteFile(Model(kModelFile), SerializeSafetensors(st.header, st.data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_THAT(output, HasSubstr("16128"));  // 64 x 63 x 4 bytes the shape needs
}

TEST_F(BrokenModelTest, TensorShapeWrongForTheConfig) {
  // Same number of bytes, so the file itself is consistent: only the model loader can see it.
  Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  st.header["model.layers.1.self_attn.q_proj.weight"]["shape"] = {32, 128};
  WriteFile(Model(kModelFile), SerializeSafetensors(st.header, st.data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_THAT(output, HasSubstr("[32, 128]"));
  EXPECT_THAT(output, HasSubstr("[64, 64]"));
}

TEST_F(BrokenModelTest, MissingTensor) {
  const std::string kDropped = "model.layers.2.mlp.up_proj.weight";
  const Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  // Rebuild the data section without the dropped tensor, keeping the others' order.
  std::vector<std::pair<int64_t, std::string>> by_offset;
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__" || name == kDropped) continue;
    by_offset.emplace_back(info["data_offsets"][0].get<int64_t>(), name);
  }
  std::sort(by_offset.begin(), by_offset.end());
  nlohmann::json header;
  if (st.header.contains("__metadata__")) header["__metadata__"] = st.header["__metadata__"];
  std::string data;
  for (const auto& [begin, name] : by_offset) {
    nlohmann::json info = st.header[name];
    const int64_t end = info["data_offsets"][1].get<int64_t>();
    const int64_t new_begin = static_cast<int64_t>(data.size());
    data += st.data.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    info["data_offsets"] = {new_begin, static_cast<int64_t>(data.size())};
    header[name] = info;
  }
  ASSERT_EQ(data.size(), st.data.size() - 172 * 64 * 4);
  WriteFile(Model(kModelFile), SerializeSafetensors(header, data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(kDropped));
  EXPECT_THAT(output, HasSubstr("not found"));
}

TEST_F(BrokenModelTest, ConfigJsonSyntaxError) {
  std::string text = ReadFile(Model("config.json"));
  const size_t comma = text.find(',');
  ASSERT_NE(comma, std::string::npos);
  text.erase(comma, 1);  // "architectures": [...] "attention_bias": ...
  WriteFile(Model("config.json"), text);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
  EXPECT_THAT(output, HasSubstr("malformed JSON"));
}

TEST_F(BrokenModelTest, UnsupportedArchitecture) {
  nlohmann::json config = ReadConfig();
  config["architectures"] = {"GPT2LMHeadModel"};
  config["model_type"] = "gpt2";
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("GPT2LMHeadModel"));
  EXPECT_THAT(output, HasSubstr("unsupported architecture"));
}

// GPTQ loads (engine/model/toolkit_quant.h), but not every variant: 3-bit packing is refused naming the
// field.
TEST_F(BrokenModelTest, UnsupportedQuantizationGptq3Bit) {
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = {
      {"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}, {"desc_act", false}, {"sym", true}};
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("bits"));
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
}

// A quant_method no loader knows is refused naming it.
TEST_F(BrokenModelTest, UnsupportedQuantizationMethod) {
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = {{"quant_method", "exl2"}, {"bits", 4}};
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("exl2"));
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
}

// 2:4 sparse-24-bitmask loads (engine/model/sparse24.h); another sparsity structure is refused naming the
// field.
TEST_F(BrokenModelTest, UnsupportedSparsityStructure) {
  // The quantization_config of a real 2:4-sparse compressed-tensors checkpoint, its structure changed.
  const nlohmann::json sparse = nlohmann::json::parse(
      ReadFile(fs::path(SCORED_DATA_DIR) /
               "models-configs/compressed-tensors/llama2.c-stories42M-pruned2.4-compressed/config.json"));
  ASSERT_EQ(sparse["quantization_config"]["sparsity_config"]["format"], "sparse-24-bitmask");
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = sparse["quantization_config"];
  config["quantization_config"]["sparsity_config"]["sparsity_structure"] = "unstructured";
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("sparsity_structure"));
  EXPECT_THAT(output, HasSubstr("unstructured"));
}

TEST_F(BrokenModelTest, MissingConfigJson) {
  ASSERT_TRUE(fs::remove(Model("config.json")));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
  EXPECT_THAT(output, HasSubstr("cannot open"));
}

// A GGUF (or llama2.c) file given as --model, a folder of GGUF files, a hub id not in the local cache, a path
// that does not exist: each says what a model folder is instead of "config.json: cannot open".
TEST_F(BrokenModelTest, NotAHuggingFaceFolderSaysWhatIs) {
  const fs::path gguf = tmp_dir_ / "model-Q4_K_M.gguf";
  WriteFile(gguf, "GGUF");
  scored::testing::ScoredProcessOptions opts;
  for (const auto& [model, says] : std::vector<std::pair<std::string, std::string>>{
           {gguf.string(), "is a file: a model is a Hugging Face folder (config.json and *.safetensors)"},
           {"HuggingFaceTB/SmolLM2-135M", "is not in the local hub cache"},
           {"/no/such/model/folder", "no such folder"}}) {
    opts.args = {"--model=" + model, "--backend=cpu"};
    auto proc = scored::testing::ScoredProcess::Start(opts);
    ASSERT_FALSE(proc.ok()) << model;
    EXPECT_THAT(std::string(proc.status().message()), HasSubstr(says)) << model;
  }
  ASSERT_TRUE(fs::remove(Model("config.json")));
  fs::copy_file(gguf, Model("model-Q4_K_M.gguf"));
  EXPECT_THAT(ExpectLoadFailure(), HasSubstr("holds model-Q4_K_M.gguf but no config.json"));
}

TEST_F(BrokenModelTest, ShardedIndexNamesMissingShard) {
  const std::string kShard1 = "model-00001-of-00002.safetensors";
  const std::string kShard2 = "model-00002-of-00002.safetensors";  // never written
  const Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  fs::rename(Model(kModelFile), Model(kShard1));
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__") continue;
    weight_map[name] = name.rfind("model.layers.4.", 0) == 0 ? kShard2 : kShard1;
  }
  nlohmann::json index = {{"metadata", {{"total_size", st.data.size()}}}, {"weight_map", weight_map}};
  WriteFile(Model("model.safetensors.index.json"), index.dump(2));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kShard2).string()));
  EXPECT_THAT(output, HasSubstr("cannot open"));
}

// A NaN in a quantization scale used to load and serve NaN log-probabilities (rank 1 and greedy false at
// once). One linear of the model is stored as a real int8 per-channel checkpoint (compressed-tensors
// "int-quantized"): with finite scales it loads and serves; with a NaN scale the load is refused, naming the
// tensor and the index.
TEST_F(BrokenModelTest, NanQuantizationScaleIsRefusedAtLoadNamingTheTensor) {
  const std::string kModule = "model.layers.1.self_attn.q_proj";
  const Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  const std::vector<float> w = TensorFloats(st, kModule + ".weight");  // [64, 64]
  constexpr int64_t kRows = 64, kCols = 64;
  ASSERT_EQ(w.size(), static_cast<size_t>(kRows * kCols));
  std::string q(static_cast<size_t>(kRows * kCols), '\0');
  std::vector<float> scale(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    float max_abs = 0.0f;
    for (int64_t c = 0; c < kCols; ++c) max_abs = std::max(max_abs, std::fabs(w[r * kCols + c]));
    scale[r] = max_abs / 127.0f;
    for (int64_t c = 0; c < kCols; ++c) {
      q[r * kCols + c] = static_cast<char>(static_cast<int8_t>(std::lround(w[r * kCols + c] / scale[r])));
    }
  }
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = {
      {"quant_method", "compressed-tensors"},
      {"format", "int-quantized"},
      {"quantization_status", "compressed"},
      {"config_groups",
       {{"group_0",
         {{"targets", {kModule}},
          {"weights", {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}}}}}}}};
  WriteConfig(config);
  auto write = [&](const std::vector<float>& scales) {
    std::string scale_bytes(scales.size() * sizeof(float), '\0');
    std::memcpy(scale_bytes.data(), scales.data(), scale_bytes.size());
    WriteFile(Model(kModelFile),
              RebuildSafetensors(st, {{kModule + ".weight", {"I8", {kRows, kCols}, q}},
                                      {kModule + ".weight_scale", {"F32", {kRows, 1}, scale_bytes}}}));
  };

  write(scale);  // control: the finite int8 checkpoint loads and serves
  {
    scored::testing::ScoredProcessOptions opts;
    opts.args = {"--model=" + model_dir_.string(), "--backend=cpu"};
    auto proc = scored::testing::ScoredProcess::Start(opts);
    ASSERT_TRUE(proc.ok()) << proc.status();
    EXPECT_THAT((*proc)->ReadLog(), HasSubstr("int8-w8a16-channel-sym"));
  }

  std::vector<float> nan_scale = scale;
  nan_scale[17] = std::numeric_limits<float>::quiet_NaN();
  write(nan_scale);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kModelFile).string()));
  EXPECT_THAT(output,
              HasSubstr("tensor '" + kModule + ".weight_scale' holds a NaN or an infinity at index 17"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("model loaded")));
}

double MetricOf(const scored::testing::ScoredProcess& p, const std::string& sample) {
  auto text = scored::testing::HttpGet("127.0.0.1", p.metrics_port(), "/metrics");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return -1;
  auto v = scored::testing::MetricValue(*text, sample);
  EXPECT_TRUE(v.ok()) << sample << ": " << v.status();
  return v.ok() ? *v : -1;
}

// A NaN in a dense weight (not scanned at load: that would be a pass over the whole checkpoint) makes the
// real CPU engine compute NaN log-probabilities. They never reach the client: each request fails alone with
// INTERNAL naming the position, is counted in scored_nonfinite_results_total, and the server keeps serving.
TEST_F(BrokenModelTest, NanActivationsAreAPerRequestErrorAndAMetric) {
  Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  const std::string kTensor = "model.layers.2.mlp.down_proj.weight";
  std::vector<float> w = TensorFloats(st, kTensor);
  w[5] = std::numeric_limits<float>::quiet_NaN();
  std::string bytes(w.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), w.data(), bytes.size());
  WriteFile(Model(kModelFile), RebuildSafetensors(st, {{kTensor, {"F32", {64, 172}, bytes}}}));

  scored::testing::ScoredProcessOptions opts;
  opts.args = {"--model=" + model_dir_.string(), "--backend=cpu"};
  auto proc = scored::testing::ScoredProcess::Start(opts);
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_EQ(MetricOf(**proc, "scored_nonfinite_results_total"), 0);
  auto stub =
      v1::Scorer::NewStub(grpc::CreateChannel((*proc)->grpc_address(), grpc::InsecureChannelCredentials()));

  v1::ScoreRequest request;
  for (int32_t id : {1, 403, 407, 261, 378}) request.mutable_tokens()->add_ids(id);
  request.set_score_from(2);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ScoreResponse response;
  const grpc::Status status = stub->Score(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
  EXPECT_EQ(status.error_message(),
            "non-finite log-probability (nan) at position 2 (NaN/Inf in the model's activations)");
  EXPECT_EQ(MetricOf(**proc, "scored_nonfinite_results_total"), 1);
  EXPECT_EQ(MetricOf(**proc, "scored_requests_total{code=\"INTERNAL\",method=\"Score\"}"), 1);

  // In a stream each such request gets its own error response, and the stream goes on.
  grpc::ClientContext stream_context;
  stream_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ScoreStream(&stream_context);
  for (uint64_t id : {7, 8}) {
    request.set_request_id(id);
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  int errors = 0;
  v1::ScoreResponse r;
  while (stream->Read(&r)) {
    EXPECT_TRUE(r.has_error());
    EXPECT_EQ(r.error().code(), static_cast<int32_t>(grpc::StatusCode::INTERNAL));
    EXPECT_THAT(r.error().message(), HasSubstr("non-finite log-probability (nan) at position 2"));
    EXPECT_EQ(r.logprob_size(), 0) << "no NaN reaches the client";
    ++errors;
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(errors, 2);
  EXPECT_EQ(MetricOf(**proc, "scored_nonfinite_results_total"), 3);
  auto health = scored::testing::CheckHealth((*proc)->grpc_address(), "");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, scored::testing::HealthStatus::kServing) << "a per-request error, not a fatal one";
}

}  // namespace
}  // namespace scored
