// scored_bench: throughput of the CUDA engine on ctx-long windows, and its agreement with transformers.
//
//   scored_bench --model DIR [--tp 1] [--ctx 2048] [--batches 1,2,4,8,16] [--reps 3] [--dtype bf16|fp32]
//                [--ref DIR/ref_windows.bin [--gate 1]] [--profile 1] [--graph 1] [--stages 1] [--nccl 1]
//                [--tp_row_chunks 0] [--row_parallel_halves 1] [--tp_exchange copy|nccl]
//                [--moe_gemm mma|sm90|sm90_dequant] [--moe_sm90_schedule cooperative|cooperative2x1|pingpong]
//                [--reference_model DIR [--want_reference 1] [--alone 1]]
//
// --tp_row_chunks, --row_parallel_halves, --tp_exchange, --moe_gemm, --moe_sm90_schedule: the EngineOptions
// fields (and `scored` flags) of the same names (engine/engine.h), defaults as there.
// --tp N: EngineOptions::tp (N GPUs, tensor-parallel). Load time = engine creation (open -> ready to score);
// GPU memory in use is printed per device (Engine::DeviceMemory()).
//
// For each batch size B: B random windows of ctx tokens per Score() call (one varlen forward), one warm-up
// call, then the median of --reps timed calls (host clock around the synchronous Score()). Reports tokens/s;
// TFLOP/s counted as DESIGN.md §7 (2 x non-embedding parameters + causal attention 2*2*(ctx/2)*hidden per
// layer, per token, the same count as the transformers baseline script; a mixture-of-experts model's active
// parameters only, as hf_peers.py moe counts them; q_dim for hidden where they differ,
// and the keys a sliding window leaves: AttentionFlopsPerToken); the rate of a plain cuBLASLt bf16
// GEMM over the same decoder-layer shapes at B*ctx rows measured in the same run, and our ratio to it;
// GPU memory in use (cudaMemGetInfo: the engine reserves everything at start, so this is also its peak).
// FLOP-bound limit: the same per-token count at the plain GEMM rate times the number of GPUs (tp), in tok/s;
// our share of it. --nccl 1 (tp > 1): after the runs, NCCL all-reduces of the sizes the tensor-parallel
// forward issues (2 per layer, fp32 [B*ctx, hidden]), timed alone on the same GPUs: their time per forward
// and its share of the measured forward (the NCCL share, as far as the forward does not overlap them with
// compute).
// --graph 1: for each B, the forward alone (cuda::Forward on the engine's own data structures, heuristic GEMM
// choices) timed with events when enqueued directly and when replayed from a captured CUDA graph: the launch
// gaps a graph would remove, and Score()'s host share (Score time minus the enqueued forward).
// --stages 1: for each B, the same forward (enqueued) with cuda::StageTimes set: each stage's GPU time (from
// the event before it to the event after it, so a stage includes its launch gaps) per forward, summed over
// the layers, averaged over --reps forwards, with its calls per forward and its share.
// --ref: scores the windows of make_random_llama.py's ref_windows.bin, prints the SHA-256 of the logprobs'
// bytes (bitwise comparison of two builds) and mean/max |delta| against transformers; with --gate 1 (default)
// exits 1 when the mean against transformers' fp32 forward exceeds 0.01 nats (--gate 0 for a quantized
// checkpoint of the same weights: the difference is then quantization's).
// --reference_model DIR: EngineOptions::reference_model_dir (R; --model is Q): one engine holds both models.
// With --want_reference 1 every request sets ScoreRequest::want_reference and, for each B, the pair's rate is
// printed (tokens/s, each token through both models: the windows' tokens / the Score() time) with the mean
// KLD and same-top share over the timed windows (a sanity figure: random windows); then (--alone 1, the
// default) the pair engine scores the same windows with want_reference off (Q, R resident), the pair engine
// is destroyed, and an engine of Q alone and one of R alone are created, timed on the same windows and
// destroyed one after the other: the "ratio" line compares the pair's rate with 1 / (1/r_Q + 1/r_R), the rate
// of scoring each model alone (issue 17's target: >= 0.95). The "memory" line: the pair engine's GPU memory
// in use (all GPUs, the largest reading after load and after each B) against ModelInfo::resident_bytes of Q
// and of ModelInfo::reference + 6 GiB per GPU (the target). With --want_reference 0 the pair engine scores Q
// only (R resident): Q's rate and the memory line. The TFLOP/s and plain-GEMM comparisons are not run then.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/base/sha256.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/stage_times.h"
#include "engine/cuda/transformer.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/engine.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/logprob.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rope.h"
#include "engine/kernels/swiglu.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/score_contract.h"
#include "tests/proc_status.h"

namespace scored {
namespace {

struct Args {
  std::string model;
  std::string ref;
  int64_t ctx = 2048;
  std::vector<int64_t> batches = {1, 2, 4, 8, 16};
  int reps = 3;
  int tp = 1;
  bool nccl = true;
  bool profile = false;
  bool gate = true;
  bool graph = false;
  bool stages = false;
  ComputeDtype dtype = ComputeDtype::kBf16;
  int tp_row_chunks = 0;
  bool row_parallel_halves = true;
  TpExchange tp_exchange = TpExchange::kCopy;
  MoeGemm moe_gemm = MoeGemm::kSm90Dequant;
  MoeSm90Schedule moe_sm90_schedule = MoeSm90Schedule::kCooperative;
  std::string reference_model;
  bool want_reference = false;
  bool alone = true;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--model") {
      args->model = value;
    } else if (key == "--ref") {
      args->ref = value;
    } else if (key == "--reference_model") {
      args->reference_model = value;
    } else if (key == "--want_reference") {
      args->want_reference = value == "1";
    } else if (key == "--alone") {
      args->alone = value == "1";
    } else if (key == "--ctx") {
      args->ctx = std::stoll(value);
    } else if (key == "--profile") {
      args->profile = value == "1";
    } else if (key == "--graph") {
      args->graph = value == "1";
    } else if (key == "--stages") {
      args->stages = value == "1";
    } else if (key == "--gate") {
      args->gate = value == "1";
    } else if (key == "--tp") {
      args->tp = std::stoi(value);
    } else if (key == "--nccl") {
      args->nccl = value == "1";
    } else if (key == "--tp_row_chunks") {
      args->tp_row_chunks = std::stoi(value);
    } else if (key == "--row_parallel_halves") {
      args->row_parallel_halves = value == "1";
    } else if (key == "--tp_exchange") {
      if (value != "copy" && value != "nccl") {
        std::fprintf(stderr, "--tp_exchange must be copy or nccl, got '%s'\n", value.c_str());
        return false;
      }
      args->tp_exchange = value == "nccl" ? TpExchange::kNccl : TpExchange::kCopy;
    } else if (key == "--moe_gemm") {
      if (value != "mma" && value != "sm90" && value != "sm90_dequant") {
        std::fprintf(stderr, "--moe_gemm must be mma, sm90 or sm90_dequant, got '%s'\n", value.c_str());
        return false;
      }
      args->moe_gemm = value == "mma"    ? MoeGemm::kMma
                       : value == "sm90" ? MoeGemm::kSm90
                                         : MoeGemm::kSm90Dequant;
    } else if (key == "--moe_sm90_schedule") {
      if (value != "cooperative" && value != "cooperative2x1" && value != "pingpong") {
        std::fprintf(stderr,
                     "--moe_sm90_schedule must be cooperative, cooperative2x1 or pingpong, got '%s'\n",
                     value.c_str());
        return false;
      }
      args->moe_sm90_schedule = value == "pingpong"         ? MoeSm90Schedule::kPingpong
                                : value == "cooperative2x1" ? MoeSm90Schedule::kCooperative2x1
                                                            : MoeSm90Schedule::kCooperative;
    } else if (key == "--reps") {
      args->reps = std::stoi(value);
    } else if (key == "--dtype") {
      args->dtype = value == "fp32" ? ComputeDtype::kFp32 : ComputeDtype::kBf16;
    } else if (key == "--batches") {
      args->batches.clear();
      std::stringstream ss(value);
      std::string item;
      while (std::getline(ss, item, ',')) args->batches.push_back(std::stoll(item));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", key.c_str());
      return false;
    }
  }
  if (args->want_reference && args->reference_model.empty()) {
    std::fprintf(stderr, "--want_reference 1 needs --reference_model\n");
    return false;
  }
  return !args->model.empty() && args->reps > 0 && args->tp > 0 && !args->batches.empty();
}

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of one Score() call of `requests`: the median of `reps` timed calls (host clock around the
// synchronous call) after one warm-up call. *last: the results of the last call.
absl::StatusOr<double> TimeScore(Engine& engine, const std::vector<ScoreRequest>& requests, int reps,
                                 std::vector<ScoreResult>* last) {
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto results = ScoreAll(engine, requests);
    const double dt = Seconds(std::chrono::steady_clock::now() - t0);
    if (!results.ok()) return results.status();
    if (rep > 0) times.push_back(dt);
    if (rep == reps) *last = *std::move(results);
  }
  return Median(times);
}

// Mean |delta| of the engine's logprobs against the transformers references of make_random_llama.py's file
// (fp32head: bf16 model, fp32 lm_head; bf16logits: bf16 model as evaluation scripts run it; fp32model: fp32
// forward of the same weights, the near-exact answer), and of the two bf16 transformers runs against
// fp32model. Returns 1 when `gate` and ours differs from the transformers fp32 forward by more than 0.01 nats
// on average (make_random_llama.py's model is well conditioned, PPL in the tens to hundreds, so 0.01 is a
// meaningful bar for a bf16 engine).
int CheckReference(Engine& engine, const std::string& path, bool gate) {
  std::ifstream in(path, std::ios::binary);
  int32_t windows = 0, ctx = 0;
  in.read(reinterpret_cast<char*>(&windows), 4);
  in.read(reinterpret_cast<char*>(&ctx), 4);
  if (!in || windows <= 0 || ctx < 2) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const size_t count = static_cast<size_t>(windows) * (ctx - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(windows) * ctx);
  std::vector<float> head32(count), logits16(count), model32(count);
  in.read(reinterpret_cast<char*>(tokens.data()), tokens.size() * 4);
  for (std::vector<float>* v : {&head32, &logits16, &model32})
    in.read(reinterpret_cast<char*>(v->data()), count * 4);
  if (!in) {
    std::fprintf(stderr, "%s is truncated\n", path.c_str());
    return 1;
  }
  std::vector<ScoreRequest> requests(windows);
  for (int32_t w = 0; w < windows; ++w)
    requests[w].tokens.assign(tokens.begin() + w * ctx, tokens.begin() + (w + 1) * ctx);
  auto results = ScoreAll(engine, requests);
  if (!results.ok()) {
    std::fprintf(stderr, "Score failed: %s\n", results.status().ToString().c_str());
    return 1;
  }
  std::vector<float> ours(count);
  for (int32_t w = 0; w < windows; ++w) {
    std::copy((*results)[w].logprob.begin(), (*results)[w].logprob.end(),
              ours.begin() + static_cast<size_t>(w) * (ctx - 1));
  }
  const auto mean_abs = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < count; ++i) sum += std::abs(static_cast<double>(a[i]) - b[i]);
    return sum / count;
  };
  const auto ppl = [&](const std::vector<float>& a) {
    double sum = 0;
    for (float v : a) sum += v;
    return std::exp(-sum / count);
  };
  const double ours_vs_fp32 = mean_abs(ours, model32);
  // The bytes of every logprob: two builds agree bit for bit exactly when their digests do.
  std::printf(
      "logprob digest: sha256 %s of %zu floats\n",
      Sha256Hex(std::string_view(reinterpret_cast<const char*>(ours.data()), ours.size() * 4)).c_str(),
      ours.size());
  std::printf(
      "vs transformers (%d windows x %d), mean |delta logprob|: ours-vs-fp32model %.5f, "
      "ours-vs-fp32head %.5f, ours-vs-bf16logits %.5f | transformers bf16 vs its fp32model: fp32head %.5f, "
      "bf16logits %.5f | PPL ours %.1f, fp32model %.1f, fp32head %.1f, bf16logits %.1f\n",
      windows, ctx, ours_vs_fp32, mean_abs(ours, head32), mean_abs(ours, logits16), mean_abs(head32, model32),
      mean_abs(logits16, model32), ppl(ours), ppl(model32), ppl(head32), ppl(logits16));
  std::fflush(stdout);
  if (!gate) return 0;
  const bool pass = ours_vs_fp32 <= 0.01;
  std::printf("gate: ours-vs-fp32model %.5f <= 0.01: %s\n", ours_vs_fp32, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

// Causal attention's multiply-adds per token of a ctx-long window, summed over the layers: QK^T and PV, 2 x 2
// x q_dim FLOPs per visible key, averaged over the window's positions: ctx / 2 keys for full causal attention
// (DESIGN.md §7's 2 * 2 * (ctx / 2) * hidden where q_dim = hidden), fewer on a sliding-window layer (Gemma,
// Phi-3: position p sees min(p, w) keys).
double AttentionFlopsPerToken(const ModelConfig& c, int64_t ctx) {
  const double q_dim = static_cast<double>(c.num_heads * c.head_dim);
  double keys = 0.0;  // sum over layers of the mean number of keys a position sees
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const int64_t w = c.LayerWindow(l);
    if (w <= 0 || w >= ctx) {
      keys += ctx / 2.0;
    } else {  // positions 1..w see p keys, the rest w: the mean of min(p, w) over p = 1..ctx (~ctx/2 at w =
              // ctx)
      keys += (w * (w + 1) / 2.0 + static_cast<double>(ctx - w) * w) / ctx;
    }
  }
  return 2.0 * 2.0 * q_dim * keys;
}

// A mixture-of-experts model's parameters that one token does not run: in every sparse layer the
// num_experts - num_experts_per_tok experts it is not routed to (gate, up and down each), so that the FLOP
// count is of the active parameters (the peer's, hf_peers.py moe). 0 for a dense model.
double InactiveExpertParameters(const ModelConfig& c) {
  double inactive = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.IsSparseLayer(l)) continue;
    inactive += static_cast<double>(c.num_experts - c.num_experts_per_tok) * 3.0 *
                static_cast<double>(c.moe_intermediate_size) * static_cast<double>(c.hidden_size);
  }
  return inactive;
}

// A plain cuBLASLt bf16 GEMM over one decoder layer's shapes at `tokens` rows, random data: TFLOP/s.
// layers = 1: one layer's GEMMs per timed run (a burst of a few ms: the GPU at its highest clock);
// layers = num_layers: as many GEMMs back to back as a forward runs (the rate the GPU sustains for that
// long).
double PlainGemmTflops(const ModelConfig& c, int64_t tokens, int reps, int64_t layers) {
  const int64_t qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim, q_dim = c.num_heads * c.head_dim;
  struct Shape {
    int64_t out, in;
  };
  const Shape shapes[] = {{qkv, c.hidden_size},
                          {c.hidden_size, q_dim},
                          {2 * c.intermediate_size, c.hidden_size},
                          {c.hidden_size, c.intermediate_size}};
  int64_t max_x = 0, max_w = 0, max_y = 0;
  double flops = 0;
  for (const Shape& s : shapes) {
    max_x = std::max(max_x, tokens * s.in);
    max_w = std::max(max_w, s.out * s.in);
    max_y = std::max(max_y, tokens * s.out);
    flops += 2.0 * tokens * s.out * s.in * layers;
  }
  auto runner = cuda::GemmRunner::Create(tokens);
  auto x = cuda::DeviceBuffer::Allocate(max_x * 2, "bench x");
  auto w = cuda::DeviceBuffer::Allocate(max_w * 2, "bench w");
  auto y = cuda::DeviceBuffer::Allocate(max_y * 2, "bench y");
  if (!runner.ok() || !x.ok() || !w.ok() || !y.ok()) return 0.0;
  // Random bf16 N(0, 1) values (never zeros: they run faster than real data).
  std::vector<uint16_t> host(int64_t{1} << 22);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (uint16_t& v : host) v = FloatToBf16(dist(rng));
  for (const cuda::DeviceBuffer* b : {&*x, &*w}) {
    for (int64_t off = 0; off < b->bytes(); off += host.size() * 2) {
      cudaMemcpy(b->as<char>() + off, host.data(), std::min<int64_t>(host.size() * 2, b->bytes() - off),
                 cudaMemcpyHostToDevice);
    }
  }
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l) {
      for (const Shape& s : shapes) {
        if (!(*runner)
                 ->Linear(x->data(), w->data(), y->data(), tokens, s.out, s.in, cuda::GemmTypes::kBf16ToBf16,
                          nullptr)
                 .ok()) {
          return 0.0;
        }
      }
    }
    cudaDeviceSynchronize();
    if (r > 0) times.push_back(Seconds(std::chrono::steady_clock::now() - t0));
  }
  return flops / Median(times) / 1e12;
}

// Milliseconds for `count` fp32 sum all-reduces of `elements` each, issued back to back on every rank of `tp`
// local GPUs 0..tp-1 (one host thread and stream per rank, as the engine's ranks): the median of `reps`
// rounds after a warm-up round, the slowest rank's. Returns -1 (and says why on stderr) when NCCL fails.
double NcclAllReduceMs(int tp, int64_t elements, int count, int reps) {
  std::vector<int> devices(tp);
  for (int r = 0; r < tp; ++r) devices[r] = r;
  auto comms = dist::NcclCommunicator::CreateLocal(devices);
  if (!comms.ok()) {
    std::fprintf(stderr, "nccl: %s\n", comms.status().ToString().c_str());
    return -1.0;
  }
  std::vector<double> rank_ms(tp, -1.0);
  std::vector<std::string> errors(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      auto buf = cuda::DeviceBuffer::Allocate(elements * 4, "nccl bench");  // [elements] fp32
      cudaStream_t stream = nullptr;
      if (!buf.ok() || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        errors[r] = buf.ok() ? "cannot create a stream" : buf.status().ToString();
        return;
      }
      cudaMemsetAsync(buf->data(), 0, buf->bytes(), stream);
      dist::NcclCommunicator& comm = *(*comms)[r];
      std::vector<double> times;
      absl::Status status;
      for (int rep = 0; status.ok() && rep <= reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; status.ok() && i < count; ++i) {
          status = comm.AllReduceSum(buf->data(), buf->data(), elements, dist::ReduceDType::kF32, stream);
        }
        if (status.ok()) status = comm.Synchronize(stream);
        if (rep > 0) times.push_back(Seconds(std::chrono::steady_clock::now() - t0) * 1e3);
      }
      cudaStreamDestroy(stream);
      if (status.ok()) {
        rank_ms[r] = Median(times);
      } else {
        errors[r] = status.ToString();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  (void)dist::DestroyCommunicators(&*comms);
  double ms = 0.0;
  for (int r = 0; r < tp; ++r) {
    if (rank_ms[r] < 0) {
      std::fprintf(stderr, "nccl rank %d: %s\n", r, errors[r].c_str());
      return -1.0;
    }
    ms = std::max(ms, rank_ms[r]);
  }
  return ms;
}

// "a / b / c" of the devices' memory in use, GiB.
std::string MemoryInUse(const std::vector<std::pair<int64_t, int64_t>>& memory) {
  std::string out;
  char buf[32];
  for (const auto& [used, total] : memory) {
    std::snprintf(buf, sizeof(buf), "%s%.1f", out.empty() ? "" : " / ", used / 1073741824.0);
    out += buf;
  }
  return out.empty() ? "0.0" : out;
}

// Host memory while the model loads: the largest anonymous RSS seen (sampled every 20 ms; a full host copy of
// the checkpoint would show here) and, at the end, the peak RSS including the checkpoint's mmap'd file pages
// (page cache the kernel may drop, not a copy).
class HostMemoryWatch {
 public:
  HostMemoryWatch()
      : thread_([this] {
          while (!done_.load()) {
            peak_anon_ = std::max(peak_anon_.load(), testing::ProcStatusBytes("RssAnon"));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  // Stops sampling; the peak anonymous RSS in bytes.
  int64_t Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    return std::max(peak_anon_.load(), testing::ProcStatusBytes("RssAnon"));
  }
  ~HostMemoryWatch() { Stop(); }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int64_t> peak_anon_{0};
  std::thread thread_;
};

// Bytes of the checkpoint's *.safetensors files.
int64_t CheckpointBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") total += static_cast<int64_t>(entry.file_size());
  }
  return total;
}

// Fills a device buffer with random bf16 N(0, 1) values (never zeros: they run faster than real data).
void FillRandomBf16(const cuda::DeviceBuffer& b) {
  static std::vector<uint16_t> host;
  if (host.empty()) {
    host.resize(int64_t{1} << 22);
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (uint16_t& v : host) v = FloatToBf16(dist(rng));
  }
  for (int64_t off = 0; off < b.bytes(); off += static_cast<int64_t>(host.size()) * 2) {
    cudaMemcpy(b.as<char>() + off, host.data(),
               std::min<int64_t>(static_cast<int64_t>(host.size()) * 2, b.bytes() - off),
               cudaMemcpyHostToDevice);
  }
}

// Median milliseconds of `fn` (device work on the default stream), events around each of `reps` runs.
template <typename Fn>
double TimeMs(Fn fn, int reps) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  fn();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(times);
}

// Per-op times of one forward at `tokens` rows in windows of `ctx` (random bf16 data; GEMMs tuned and RoPE
// from the cos/sin table, as the engine runs them), scaled to the model: where the forward's time goes.
void Profile(const ModelConfig& c, int64_t tokens, int64_t ctx) {
  using kernels::bf16_t;
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd, qkv_dim = q_dim + 2 * kv_dim;
  const int64_t chunk = std::min<int64_t>(tokens, cuda::kLmHeadChunkTokens);
  auto runner = cuda::GemmRunner::Create(tokens);
  auto qkv = cuda::DeviceBuffer::Allocate(tokens * qkv_dim * 2, "qkv");
  auto attn = cuda::DeviceBuffer::Allocate(tokens * q_dim * 2, "attn");
  auto x = cuda::DeviceBuffer::Allocate(tokens * inter * 2 * 2, "x");
  auto y = cuda::DeviceBuffer::Allocate(tokens * 2 * inter * 2, "y");  // gate|up's output, the widest
  auto w = cuda::DeviceBuffer::Allocate(c.vocab_size * hidden * 2, "w");
  auto residual = cuda::DeviceBuffer::Allocate(tokens * hidden * 4, "residual");
  auto norm_w = cuda::DeviceBuffer::Allocate(hidden * 4, "norm");
  auto logits = cuda::DeviceBuffer::Allocate(chunk * c.vocab_size * 4, "logits");
  auto ints = cuda::DeviceBuffer::Allocate((tokens + 1) * 4 * 3, "ints");
  auto lp = cuda::DeviceBuffer::Allocate(tokens * 8, "lp");
  auto greedy = cuda::DeviceBuffer::Allocate(tokens, "greedy");
  auto inv_freq = cuda::DeviceBuffer::Allocate(hd * 2, "inv_freq");
  auto rope_table = cuda::DeviceBuffer::Allocate(ctx * hd * 4, "rope_table");  // (cos, sin) of ctx positions
  if (!runner.ok() || !qkv.ok() || !attn.ok() || !x.ok() || !y.ok() || !w.ok() || !residual.ok() ||
      !norm_w.ok() || !logits.ok() || !ints.ok() || !lp.ok() || !greedy.ok() || !inv_freq.ok() ||
      !rope_table.ok()) {
    std::printf("profile: allocation failed\n");
    return;
  }
  for (const cuda::DeviceBuffer* b : {&*qkv, &*x, &*w}) FillRandomBf16(*b);
  cudaMemset(residual->data(), 0x3c, residual->bytes());  // fp32 values ~0.01
  cudaMemset(norm_w->data(), 0x3f, norm_w->bytes());      // fp32 values ~0.75
  cudaMemset(inv_freq->data(), 0x3a, inv_freq->bytes());
  (void)kernels::RopeCosSinTable(inv_freq->as<float>(), ctx, hd / 2, rope_table->as<float>(), nullptr);
  std::vector<int32_t> host_ints((tokens + 1) * 3, 0);
  int32_t* cu = host_ints.data();
  const int64_t seqs = tokens / ctx;
  for (int64_t s = 0; s <= seqs; ++s) cu[s] = static_cast<int32_t>(s * ctx);
  int32_t* positions = cu + tokens + 1;
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(t % ctx);
  int32_t* targets = positions + tokens;
  for (int64_t t = 0; t < tokens; ++t) targets[t] = static_cast<int32_t>((t * 7919) % c.vocab_size);
  cudaMemcpy(ints->data(), host_ints.data(), host_ints.size() * 4, cudaMemcpyHostToDevice);
  const int32_t* d_cu = ints->as<int32_t>();
  const int32_t* d_pos = d_cu + tokens + 1;
  const int32_t* d_tgt = d_pos + tokens;
  bf16_t* q = qkv->as<bf16_t>();
  kernels::AttentionShape shape;
  shape.num_tokens = tokens;
  shape.num_seqs = static_cast<int32_t>(seqs);
  shape.max_seqlen = static_cast<int32_t>(ctx);
  shape.num_heads = static_cast<int32_t>(c.num_heads);
  shape.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  shape.head_dim = static_cast<int32_t>(hd);
  shape.q_stride = shape.kv_stride = qkv_dim;
  const int reps = 5;
  struct Row {
    const char* name;
    double ms;
    double per_forward;  // times per forward
  };
  // Each layer shape (rows == tokens) tuned as the engine tunes it at load (GemmRunner::Tune), then timed.
  const auto gemm = [&](int64_t rows, int64_t out, int64_t in, cuda::GemmTypes types, void* dst,
                        const cuda::LinearOptions& options = cuda::LinearOptions()) {
    if (rows == tokens) (void)(*runner)->Tune(x->data(), w->data(), dst, out, in, types, nullptr);
    return TimeMs(
        [&] { (void)(*runner)->Linear(x->data(), w->data(), dst, rows, out, in, types, nullptr, options); },
        reps);
  };
  const double layers = static_cast<double>(c.num_layers);
  const double chunks = static_cast<double>((tokens + chunk - 1) / chunk);
  std::vector<Row> rows = {
      {"qkv GEMM", gemm(tokens, qkv_dim, hidden, cuda::GemmTypes::kBf16ToBf16, y->data()), layers},
      {"o GEMM (+= residual)",
       gemm(tokens, hidden, q_dim, cuda::GemmTypes::kBf16ToFp32, residual->data(),
            cuda::LinearOptions::Accumulate()),
       layers},
      {"gate|up GEMM", gemm(tokens, 2 * inter, hidden, cuda::GemmTypes::kBf16ToBf16, y->data()), layers},
      {"down GEMM (+= residual)",
       gemm(tokens, hidden, inter, cuda::GemmTypes::kBf16ToFp32, residual->data(),
            cuda::LinearOptions::Accumulate()),
       layers},
      {"attention",
       TimeMs(
           [&] {
             (void)kernels::CausalAttention<bf16_t>(q, q + q_dim, q + q_dim + kv_dim, d_cu, shape,
                                                    attn->as<bf16_t>(), nullptr);
           },
           reps),
       layers},
      {"rope",
       TimeMs(
           [&] {
             (void)kernels::RopeWithTable<bf16_t>(q, qkv_dim, d_pos, rope_table->as<float>(), ctx, tokens,
                                                  c.num_heads + c.num_kv_heads, hd, nullptr);
           },
           reps),
       layers},
      {"rms_norm",
       TimeMs(
           [&] {
             (void)kernels::RmsNorm<float, bf16_t>(residual->as<float>(), hidden, norm_w->as<float>(), tokens,
                                                   hidden, 1e-5f, x->as<bf16_t>(), hidden, nullptr);
           },
           reps),
       2 * layers},
      {"swiglu",
       TimeMs(
           [&] {
             (void)kernels::SwiGlu<bf16_t>(x->as<bf16_t>(), x->as<bf16_t>() + inter, 2 * inter, tokens, inter,
                                           y->as<bf16_t>(), nullptr);
           },
           reps),
       layers},
      {"lm_head GEMM (chunk)",
       gemm(chunk, c.vocab_size, hidden, cuda::GemmTypes::kBf16ToFp32, logits->data()), chunks},
      {"logprob (chunk)",
       TimeMs(
           [&] {
             kernels::LogprobOutputs out;
             out.logprob = lp->as<double>();
             out.greedy = greedy->as<uint8_t>();
             (void)kernels::ScoreLogits(logits->as<float>(), c.vocab_size, d_tgt, chunk, c.vocab_size, {},
                                        out, nullptr);
           },
           reps),
       chunks},
  };
  double total = 0;
  for (const Row& r : rows) total += r.ms * r.per_forward;
  std::printf(
      "profile at %lld tokens (windows of %lld): op, ms per call, calls per forward, ms per forward, share\n",
      static_cast<long long>(tokens), static_cast<long long>(ctx));
  for (const Row& r : rows) {
    std::printf("  %-22s %8.3f x %4.0f = %8.1f ms  %5.1f%%\n", r.name, r.ms, r.per_forward,
                r.ms * r.per_forward, 100.0 * r.ms * r.per_forward / total);
  }
  const double attn_flops = 2.0 * 2.0 * (ctx / 2.0) * hd * c.num_heads * tokens;
  std::printf("  sum %.1f ms; attention %.0f TFLOP/s (causal-counted)\n", total,
              attn_flops / (rows[4].ms * 1e-3) / 1e12);
  std::fflush(stdout);
}

// --stages: `reps` forwards with the stage timer set, the totals per forward (see --stages above).
template <typename Run>
bool PrintStages(const Run& run, int reps, cuda::Activations* acts, int64_t b, int64_t ctx) {
  cuda::StageTimes times;
  acts->stage_times = &times;
  bool ok = true;
  for (int r = 0; ok && r < reps; ++r) ok = run().ok() && times.Collect().ok();
  acts->stage_times = nullptr;
  if (!ok || reps < 1) {
    std::printf("stages B=%lld: failed\n", static_cast<long long>(b));
    return false;
  }
  double total = 0;
  for (const cuda::StageTimes::Total& t : times.totals()) total += t.ms / reps;
  std::printf(
      "stages B=%lld T=%lld: stage, ms per forward, calls per forward, ms per call, share (of %.2f ms)\n",
      static_cast<long long>(b), static_cast<long long>(ctx), total);
  for (const cuda::StageTimes::Total& t : times.totals()) {
    const double ms = t.ms / reps, calls = static_cast<double>(t.calls) / reps;
    std::printf("  %-24s %9.2f ms %5.0f x %8.4f ms %5.1f%%\n", t.name.c_str(), ms, calls, ms / calls,
                100.0 * ms / total);
  }
  std::fflush(stdout);
  return true;
}

// Forward-only timings (see --graph above): direct enqueue vs CUDA graph replay, median of `reps` each.
int ForwardTimings(const Args& args) {
  auto weights = ModelWeights::Load(args.model);
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& c = (*weights)->config();
  const int64_t max_tokens = *std::max_element(args.batches.begin(), args.batches.end()) * args.ctx;
  cuda::UploadOptions upload;
  upload.moe_gemm = args.moe_gemm;
  upload.moe_sm90_schedule = args.moe_sm90_schedule;
  auto model = cuda::UploadModel(**weights, args.dtype, nullptr, upload);
  auto gemm = cuda::GemmRunner::Create(max_tokens);
  auto stream = cuda::CudaStream::Create();
  if (!model.ok() || !gemm.ok() || !stream.ok()) {
    std::fprintf(stderr, "forward timings: setup failed\n");
    return 1;
  }
  auto acts = cuda::AllocateActivations(c, **model, max_tokens);
  if (!acts.ok()) {
    std::fprintf(stderr, "%s\n", acts.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size) - 1);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const cudaStream_t s = stream->get();
  for (int64_t b : args.batches) {
    const int64_t n = b * args.ctx;
    std::vector<int32_t> tokens(n), positions(n), targets(n), cu(b + 1);
    for (int64_t t = 0; t < n; ++t) {
      tokens[t] = id(rng);
      positions[t] = static_cast<int32_t>(t % args.ctx);
    }
    for (int64_t t = 0; t < n; ++t) targets[t] = (t + 1) % args.ctx == 0 ? 0 : tokens[t + 1];
    for (int64_t w = 0; w <= b; ++w) cu[w] = static_cast<int32_t>(w * args.ctx);
    cudaMemcpy(acts->tokens.data(), tokens.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(acts->positions.data(), positions.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(acts->targets.data(), targets.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(acts->cu_seqlens.data(), cu.data(), (b + 1) * 4, cudaMemcpyHostToDevice);
    cuda::ForwardBatch fb;
    fb.num_tokens = n;
    fb.num_seqs = static_cast<int32_t>(b);
    fb.max_seqlen = static_cast<int32_t>(args.ctx);
    fb.cu_seqlens = cu;
    fb.lm_head_rows.push_back({0, n - 1});
    const auto run = [&]() { return cuda::Forward(c, **model, **gemm, fb, &*acts, s); };
    // Direct enqueue.
    std::vector<double> direct, replay;
    bool ok = run().ok() && cudaStreamSynchronize(s) == cudaSuccess;
    for (int r = 0; ok && r < args.reps; ++r) {
      cudaEventRecord(start, s);
      ok = run().ok();
      cudaEventRecord(stop, s);
      ok = ok && cudaEventSynchronize(stop) == cudaSuccess;
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      direct.push_back(ms);
    }
    if (ok && args.stages) ok = PrintStages(run, args.reps, &*acts, b, args.ctx);
    if (ok && !args.graph) {
      std::printf("forward B=%lld T=%lld: enqueued %.2f ms\n", static_cast<long long>(b),
                  static_cast<long long>(args.ctx), Median(direct));
      std::fflush(stdout);
      continue;
    }
    // Captured once, replayed.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ok = ok && cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    const bool enqueued = ok && run().ok();
    ok = ok && cudaStreamEndCapture(s, &graph) == cudaSuccess && enqueued &&
         cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    ok = ok && cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    for (int r = 0; ok && r < args.reps; ++r) {
      cudaEventRecord(start, s);
      ok = cudaGraphLaunch(exec, s) == cudaSuccess;
      cudaEventRecord(stop, s);
      ok = ok && cudaEventSynchronize(stop) == cudaSuccess;
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      replay.push_back(ms);
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!ok || direct.empty() || replay.empty()) {
      std::printf("forward B=%lld: timing failed (%s)\n", static_cast<long long>(b),
                  cudaGetErrorString(cudaGetLastError()));
      std::fflush(stdout);
      return 1;
    }
    const double d = Median(direct), g = Median(replay);
    std::printf("forward B=%lld T=%lld: enqueued %.2f ms, graph replay %.2f ms (%+.2f%%)\n",
                static_cast<long long>(b), static_cast<long long>(args.ctx), d, g, 100.0 * (g - d) / d);
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}

// ---- --reference_model: the pair (Q + R in one engine) against each model alone ----

constexpr double kGiB = 1073741824.0;
// Issue 17's targets: the pair's rate against scoring each model alone, and its memory over the weights.
constexpr double kPairRateTarget = 0.95;
constexpr double kPairMemoryMarginGiB = 6.0;  // per GPU, over both models' weights

// Device bytes in use, summed over the engine's GPUs.
int64_t UsedBytes(const Engine& engine) {
  int64_t used = 0;
  for (const auto& [device_used, total] : engine.DeviceMemory()) used += device_used;
  return used;
}

// B random windows of ctx tokens for each B of --batches: every engine of a --reference_model run scores the
// very same windows.
std::vector<std::vector<ScoreRequest>> RandomWindows(const Args& args, int64_t vocab_size) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab_size) - 1);
  std::vector<std::vector<ScoreRequest>> windows;
  for (int64_t b : args.batches) {
    std::vector<ScoreRequest> requests(b);
    for (ScoreRequest& r : requests) {
      r.tokens.resize(args.ctx);
      for (int32_t& t : r.tokens) t = id(rng);
    }
    windows.push_back(std::move(requests));
  }
  return windows;
}

// "mean KLD X nats, same top Y% over N positions" of want_reference results; false when a result lacks the
// reference fields.
bool BaselineSummary(const std::vector<ScoreResult>& results, std::string* out) {
  double sum_kld = 0.0;
  int64_t positions = 0, same_top = 0;
  for (const ScoreResult& r : results) {
    if (r.kld.size() != static_cast<size_t>(r.num_scored) || r.same_top.size() != r.kld.size()) return false;
    sum_kld += r.sum_kld;
    positions += r.num_scored;
    for (uint8_t s : r.same_top) same_top += s;
  }
  char buf[128];
  std::snprintf(buf, sizeof(buf), "mean KLD %.6f nats, same top %.2f%% over %lld positions",
                positions > 0 ? sum_kld / positions : 0.0, positions > 0 ? 100.0 * same_top / positions : 0.0,
                static_cast<long long>(positions));
  *out = buf;
  return true;
}

// Times every batch of `windows` on `engine` with want_reference set as given: one line per B, "LABEL B=..
// T=..: X ms/step Y tok/s | NOTE | GPU memory used Z GiB" (NOTE: the KLD summary when want_reference, else
// `note`). Returns the seconds per B, or empty after printing why. *max_used: raised to the largest memory
// reading (UsedBytes) seen.
std::vector<double> TimeBatches(Engine& engine, const char* label, const Args& args,
                                std::vector<std::vector<ScoreRequest>> windows, bool want_reference,
                                const char* note, int64_t* max_used) {
  std::vector<double> seconds;
  for (size_t i = 0; i < windows.size(); ++i) {
    for (ScoreRequest& r : windows[i]) r.want_reference = want_reference;
    std::vector<ScoreResult> results;
    const absl::StatusOr<double> dt = TimeScore(engine, windows[i], args.reps, &results);
    if (!dt.ok()) {
      std::fprintf(stderr, "%s: Score failed: %s\n", label, dt.status().ToString().c_str());
      return {};
    }
    std::string summary = note;
    if (want_reference && !BaselineSummary(results, &summary)) {
      std::fprintf(stderr, "%s: want_reference results without the reference fields (kld, same_top)\n",
                   label);
      return {};
    }
    *max_used = std::max(*max_used, UsedBytes(engine));
    const int64_t b = args.batches[i];
    std::printf("%s B=%lld T=%lld: %8.1f ms/step %9.0f tok/s | %s | GPU memory used %s GiB\n", label,
                static_cast<long long>(b), static_cast<long long>(args.ctx), *dt * 1e3,
                static_cast<double>(b * args.ctx) / *dt, summary.c_str(),
                MemoryInUse(engine.DeviceMemory()).c_str());
    std::fflush(stdout);
    seconds.push_back(*dt);
  }
  return seconds;
}

// Creates the engine of `options` (one model), times the windows on it as TimeBatches does, destroys it.
std::vector<double> TimeAlone(const char* label, const EngineOptions& options, const Args& args,
                              const std::vector<std::vector<ScoreRequest>>& windows) {
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = CreateCudaEngine(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s: %s\n", label, engine.status().ToString().c_str());
    return {};
  }
  std::printf(
      "%s load: %s, %s %s, weights %.2f GiB, %.1f s open -> ready, GPU memory in use after load %s GiB\n",
      label, options.model_dir.c_str(), (*engine)->info().architecture.c_str(),
      (*engine)->info().format.c_str(), (*engine)->info().resident_bytes / kGiB,
      Seconds(std::chrono::steady_clock::now() - t0), MemoryInUse((*engine)->DeviceMemory()).c_str());
  int64_t unused = 0;
  return TimeBatches(**engine, label, args, windows, false, "alone", &unused);
}

// The --reference_model run on the loaded pair engine (see the top of the file). Returns the exit status.
int ReferenceRuns(const Args& args, EngineOptions options, std::unique_ptr<Engine> engine) {
  if (engine->info().reference == nullptr) {
    std::fprintf(stderr,
                 "--reference_model: the engine describes no reference model (ModelInfo::reference)\n");
    return 1;
  }
  // Copied now: the engine is destroyed before the alone runs.
  const ModelInfo q_info = engine->info();
  const ModelInfo r_info = *q_info.reference;
  std::printf("reference: %s %s, %.2fB params, weights %.2f GiB on the GPU (%s); model %.2f GiB\n",
              r_info.architecture.c_str(), r_info.format.c_str(), r_info.num_parameters / 1e9,
              r_info.resident_bytes / kGiB, args.reference_model.c_str(), q_info.resident_bytes / kGiB);
  std::fflush(stdout);
  const std::vector<std::vector<ScoreRequest>> windows = RandomWindows(args, q_info.vocab_size);
  int64_t max_used = UsedBytes(*engine);
  const std::vector<double> pair = TimeBatches(*engine, "pair", args, windows, args.want_reference,
                                               "want_reference off (Q scored, R resident)", &max_used);
  if (pair.empty()) return 1;
  const int gpus = std::max<int>(1, static_cast<int>(engine->DeviceMemory().size()));
  const double limit = (q_info.resident_bytes + r_info.resident_bytes) / kGiB + kPairMemoryMarginGiB * gpus;
  const double used = max_used / kGiB;
  std::printf(
      "memory: GPU memory in use %.2f GiB (per GPU now %s), weights Q %.2f GiB + R %.2f GiB + %.0f GiB x %d "
      "GPU(s) = %.2f GiB, used/limit %.3f (target <= 1: %s)\n",
      used, MemoryInUse(engine->DeviceMemory()).c_str(), q_info.resident_bytes / kGiB,
      r_info.resident_bytes / kGiB, kPairMemoryMarginGiB, gpus, limit, used / limit,
      used <= limit ? "PASS" : "FAIL");
  std::fflush(stdout);
  if (!args.want_reference || !args.alone) return 0;

  const std::vector<double> q_only =
      TimeBatches(*engine, "pair-Q-only", args, windows, false,
                  "want_reference off on the pair engine (R resident)", &max_used);
  engine.reset();
  options.reference_model_dir.clear();
  const std::vector<double> q = TimeAlone("alone-Q", options, args, windows);
  options.model_dir = args.reference_model;
  const std::vector<double> r = TimeAlone("alone-R", options, args, windows);
  if (q_only.empty() || q.empty() || r.empty()) return 1;
  for (size_t i = 0; i < pair.size(); ++i) {
    const double tokens = static_cast<double>(args.batches[i] * args.ctx);
    const double r_pair = tokens / pair[i], r_q = tokens / q[i], r_r = tokens / r[i];
    const double implied = 1.0 / (1.0 / r_q + 1.0 / r_r);
    std::printf(
        "ratio B=%lld T=%lld: pair %.0f tok/s, Q alone %.0f tok/s, R alone %.0f tok/s, implied %.0f tok/s "
        "(1 / (1/r_Q + 1/r_R)), pair/implied %.3f (target >= %.2f: %s); pair-Q-only %.0f tok/s = %.3f of Q "
        "alone\n",
        static_cast<long long>(args.batches[i]), static_cast<long long>(args.ctx), r_pair, r_q, r_r, implied,
        r_pair / implied, kPairRateTarget, r_pair / implied >= kPairRateTarget ? "PASS" : "FAIL",
        tokens / q_only[i], q[i] / q_only[i]);
  }
  std::fflush(stdout);
  return 0;
}

int Main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(
        stderr,
        "usage: scored_bench --model DIR [--tp 1] [--ctx 2048] [--batches 1,2,4,8,16] [--reps 3] "
        "[--dtype bf16|fp32] [--ref FILE [--gate 1]] [--profile 1] [--graph 1] [--stages 1] [--nccl 1] "
        "[--tp_row_chunks 0] [--row_parallel_halves 1] [--tp_exchange copy|nccl] "
        "[--moe_gemm mma|sm90|sm90_dequant] [--moe_sm90_schedule cooperative|cooperative2x1|pingpong] "
        "[--reference_model DIR [--want_reference 1] [--alone 1]]\n");
    return 2;
  }
  auto config = LoadModelConfig(args.model);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  const int64_t max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  EngineOptions options;
  options.model_dir = args.model;
  options.reference_model_dir = args.reference_model;
  options.backend = Backend::kCuda;
  options.dtype = args.dtype;
  options.tp = args.tp;
  options.max_batch_tokens = max_batch * args.ctx;
  options.tp_row_chunks = args.tp_row_chunks;
  options.row_parallel_halves = args.row_parallel_halves;
  options.tp_exchange = args.tp_exchange;
  options.moe_gemm = args.moe_gemm;
  options.moe_sm90_schedule = args.moe_sm90_schedule;
  const auto t_load = std::chrono::steady_clock::now();
  HostMemoryWatch host_memory;
  auto engine = CreateCudaEngine(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  const double load_s = Seconds(std::chrono::steady_clock::now() - t_load);
  const int64_t peak_anon = host_memory.Stop();
  const ModelInfo& info = (*engine)->info();
  std::printf("scored_bench: %s %s, %.2fB params, weights %.2f GiB on the GPU, loaded in %.1f s\n",
              info.architecture.c_str(), info.format.c_str(), info.num_parameters / 1e9,
              info.resident_bytes / 1073741824.0, load_s);
  std::printf("load: tp %d, %.1f s open -> ready, GPU memory in use after load %s GiB (per GPU)\n", info.tp,
              load_s, MemoryInUse((*engine)->DeviceMemory()).c_str());
  std::printf(
      "host memory during load: peak anonymous RSS %.2f GiB, peak RSS %.2f GiB (with the checkpoint's mmap'd "
      "pages); checkpoint %.2f GiB on disk\n",
      peak_anon / 1073741824.0, testing::ProcStatusBytes("VmHWM") / 1073741824.0,
      CheckpointBytes(args.model) / 1073741824.0);
  std::fflush(stdout);

  int rc = 0;
  if (!args.ref.empty()) rc = CheckReference(**engine, args.ref, args.gate);
  if (!args.reference_model.empty()) {
    const int pair_rc = ReferenceRuns(args, options, *std::move(engine));
    return rc != 0 ? rc : pair_rc;
  }

  // Every GEMM's weights a token runs through: the parameters less the embedding table, whose rows are
  // gathered, plus the lm_head GEMM it doubles as when tied (Gemma), less the experts a mixture-of-experts
  // token does not run.
  const double n_lin =
      static_cast<double>(info.num_parameters) -
      (config->tie_word_embeddings ? 0.0 : static_cast<double>(config->vocab_size) * config->hidden_size) -
      InactiveExpertParameters(*config);
  const double flops_per_token = 2.0 * n_lin + AttentionFlopsPerToken(*config, args.ctx);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config->vocab_size) - 1);
  std::vector<double> step_s;
  for (int64_t b : args.batches) {
    std::vector<ScoreRequest> requests(b);
    for (ScoreRequest& r : requests) {
      r.tokens.resize(args.ctx);
      for (int32_t& t : r.tokens) t = id(rng);
    }
    std::vector<ScoreResult> results;
    const absl::StatusOr<double> timed = TimeScore(**engine, requests, args.reps, &results);
    if (!timed.ok()) {
      std::fprintf(stderr, "Score failed: %s\n", timed.status().ToString().c_str());
      return 1;
    }
    const double dt = *timed;
    step_s.push_back(dt);
    const double tokens = static_cast<double>(b * args.ctx);
    const double tflops = flops_per_token * tokens / dt / 1e12;
    cudaSetDevice(0);
    const double burst = PlainGemmTflops(*config, b * args.ctx, args.reps, 1);
    const double gemm = PlainGemmTflops(*config, b * args.ctx, args.reps, config->num_layers);
    const double limit = gemm * 1e12 * args.tp / flops_per_token;  // tok/s at the plain GEMM rate on tp GPUs
    std::printf(
        "scored B=%lld T=%lld: %8.1f ms/step %9.0f tok/s %6.0f TFLOP/s | plain cuBLASLt layer GEMMs %4.0f "
        "TFLOP/s sustained over %lld layers (one-layer burst %4.0f), ratio %.2f (to the burst %.2f) | "
        "FLOP-bound "
        "limit %.0f tok/s on %d GPU(s), ours %.2f of it | GPU memory used %s GiB\n",
        static_cast<long long>(b), static_cast<long long>(args.ctx), dt * 1e3, tokens / dt, tflops, gemm,
        static_cast<long long>(config->num_layers), burst, gemm > 0 ? tflops / gemm / args.tp : 0.0,
        burst > 0 ? tflops / burst / args.tp : 0.0, limit, args.tp, limit > 0 ? tokens / dt / limit : 0.0,
        MemoryInUse((*engine)->DeviceMemory()).c_str());
    std::fflush(stdout);
  }
  if (args.tp > 1 && args.nccl) {
    for (size_t i = 0; i < args.batches.size(); ++i) {
      const int64_t elements = args.batches[i] * args.ctx * config->hidden_size;
      const int count = static_cast<int>(2 * config->num_layers);
      const double ms = NcclAllReduceMs(args.tp, elements, count, args.reps);
      if (ms < 0) {
        std::printf("nccl B=%lld: all-reduce timing failed\n", static_cast<long long>(args.batches[i]));
        rc = 1;
        continue;
      }
      const double bytes = elements * 4.0;
      std::printf(
          "nccl B=%lld T=%lld: %d all-reduces of %.0f MiB fp32 alone %.1f ms per forward = %.1f%% of the "
          "%.1f "
          "ms step (bus bandwidth %.0f GB/s)\n",
          static_cast<long long>(args.batches[i]), static_cast<long long>(args.ctx), count, bytes / 1048576.0,
          ms, 100.0 * ms / (step_s[i] * 1e3), step_s[i] * 1e3,
          2.0 * (args.tp - 1) / args.tp * bytes * count / (ms * 1e-3) / 1e9);
      std::fflush(stdout);
    }
  }
  if (args.profile || args.graph || args.stages) (*engine).reset();
  if ((args.graph || args.stages) && ForwardTimings(args) != 0) rc = 1;
  if (args.profile) Profile(*config, max_batch * args.ctx, args.ctx);
  return rc;
}

}  // namespace
}  // namespace scored

int main(int argc, char** argv) { return scored::Main(argc, argv); }
