// Encode throughput of every supported tokenizer on WikiText-2 test (wiki.test.raw, 1.3 MB, one
// string, no BOS), reported as bytes/s (MB/s) plus tokens/s; and Load time of each folder.
// BM_EncodeLibrary: the same text through libsentencepiece (the test oracle, not used by scored),
// for comparison with the native SentencePiece tokenizer.
// Data: SCORED_DATA_DIR at build time, or the SCORED_DATA environment variable at run time.
//
// Measured (Release, 2-core shared build machine under load ~10, bytes/s from CPU time):
//   native SentencePiece (tokenizer.model): stories260K 31 MB/s, Llama-2 21 MB/s, Mistral 21 MB/s;
//     Load 0.3 ms (stories260K), 17 ms (Llama-2, Mistral)
//   libsentencepiece 0.1.97 (BM_EncodeLibrary): stories260K 1.4 MB/s, Llama-2 0.65 MB/s
//   Llama-2 tokenizer.json 33 MB/s, GPT-2 29 MB/s, Qwen2.5 22 MB/s, Llama-3 tiktoken 28 MB/s
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#if SCORED_BENCH_SENTENCEPIECE_LIBRARY
#include "tests/engine/tokenizer/sentencepiece_oracle.h"
#endif

namespace scored {
namespace {

using Format = Tokenizer::Format;

std::string DataDir() {
  const char* env = std::getenv("SCORED_DATA");
  return env != nullptr ? env : SCORED_DATA_DIR;
}

const std::string& WikiText() {
  static const std::string* text = [] {
    std::ifstream in(DataDir() + "/wikitext-2-raw/wiki.test.raw", std::ios::binary);
    return new std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  return *text;
}

void BM_Encode(benchmark::State& state, const char* dir, Format format) {
  auto tok = Tokenizer::Load(DataDir() + "/" + dir, format);
  if (!tok.ok()) {
    state.SkipWithError(std::string(tok.status().message()).c_str());
    return;
  }
  const std::string& text = WikiText();
  if (text.empty()) {
    state.SkipWithError("wiki.test.raw not found");
    return;
  }
  int64_t tokens = 0;
  for (auto _ : state) {
    auto ids = (*tok)->Encode(text);
    if (!ids.ok()) {
      state.SkipWithError(std::string(ids.status().message()).c_str());
      return;
    }
    tokens = static_cast<int64_t>(ids->size());
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Load(benchmark::State& state, const char* dir, Format format) {
  for (auto _ : state) {
    auto tok = Tokenizer::Load(DataDir() + "/" + dir, format);
    if (!tok.ok()) {
      state.SkipWithError(std::string(tok.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(tok->get());
  }
}

#if SCORED_BENCH_SENTENCEPIECE_LIBRARY
void BM_EncodeLibrary(benchmark::State& state, const char* dir) {
  std::ifstream in(DataDir() + "/" + dir + "/tokenizer.model", std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tokenizer_internal::SentencePieceWrapper sp;
  const std::string error = sp.LoadFromSerializedProto(model);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string& text = WikiText();
  std::vector<int> ids;
  for (auto _ : state) {
    ids.clear();
    const std::string encode_error = sp.Encode(text, &ids);
    if (!encode_error.empty()) {
      state.SkipWithError(encode_error.c_str());
      return;
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}
#endif

#define SCORED_TOKENIZER_BENCH(name, dir, format)                                 \
  BENCHMARK_CAPTURE(BM_Encode, name, dir, format)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(BM_Load, name, dir, format)->Unit(benchmark::kMillisecond)

SCORED_TOKENIZER_BENCH(stories260K_spm, "stories260K-hf", Format::kAuto);
SCORED_TOKENIZER_BENCH(llama2_spm, "tokenizers/llama2", Format::kSentencePiece);
SCORED_TOKENIZER_BENCH(mistral_spm, "tokenizers/mistral-7b-v0.1", Format::kAuto);
SCORED_TOKENIZER_BENCH(llama2_tokenizer_json, "tokenizers/llama2", Format::kHfTokenizerJson);
SCORED_TOKENIZER_BENCH(tinyllama_tokenizer_json, "models-configs/tinyllama-1.1b-chat-v1.0", Format::kAuto);
SCORED_TOKENIZER_BENCH(gpt2_vocab_merges, "tokenizers/gpt2", Format::kAuto);
SCORED_TOKENIZER_BENCH(qwen2_5_vocab_merges, "models-configs/qwen2.5-0.5b-instruct", Format::kAuto);
SCORED_TOKENIZER_BENCH(llama3_tiktoken, "tokenizers/llama3", Format::kAuto);
#if SCORED_BENCH_SENTENCEPIECE_LIBRARY
BENCHMARK_CAPTURE(BM_EncodeLibrary, stories260K_spm, "stories260K-hf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeLibrary, llama2_spm, "tokenizers/llama2")->Unit(benchmark::kMillisecond);
#endif

}  // namespace
}  // namespace scored

BENCHMARK_MAIN();
