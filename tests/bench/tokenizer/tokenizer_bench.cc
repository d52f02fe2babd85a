// Encode throughput of every supported tokenizer on WikiText-2 test (wiki.test.raw, 1.3 MB, one
// string, no BOS), reported as bytes/s (MB/s) plus tokens/s; and Load time of each folder.
// Data: SCORED_DATA_DIR at build time, or the SCORED_DATA environment variable at run time.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "engine/tokenizer/tokenizer.h"

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
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
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

#define SCORED_TOKENIZER_BENCH(name, dir, format)                                     \
  BENCHMARK_CAPTURE(BM_Encode, name, dir, format)->Unit(benchmark::kMillisecond);   \
  BENCHMARK_CAPTURE(BM_Load, name, dir, format)->Unit(benchmark::kMillisecond)

SCORED_TOKENIZER_BENCH(stories260K_spm, "stories260K-hf", Format::kAuto);
SCORED_TOKENIZER_BENCH(llama2_spm, "tokenizers/llama2", Format::kSentencePiece);
SCORED_TOKENIZER_BENCH(mistral_spm, "tokenizers/mistral-7b-v0.1", Format::kAuto);
SCORED_TOKENIZER_BENCH(llama2_tokenizer_json, "tokenizers/llama2", Format::kHfTokenizerJson);
SCORED_TOKENIZER_BENCH(tinyllama_tokenizer_json, "models-configs/tinyllama-1.1b-chat-v1.0",
                       Format::kAuto);
SCORED_TOKENIZER_BENCH(gpt2_vocab_merges, "tokenizers/gpt2", Format::kAuto);
SCORED_TOKENIZER_BENCH(qwen2_5_vocab_merges, "models-configs/qwen2.5-0.5b-instruct",
                       Format::kAuto);
SCORED_TOKENIZER_BENCH(llama3_tiktoken, "tokenizers/llama3", Format::kAuto);

}  // namespace
}  // namespace scored

BENCHMARK_MAIN();
