#include "client/ppl/windows.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace scored {
namespace ppl {
namespace {

// Copies stream[begin, end) into a window scoring [score_from, end - begin).
Window Slice(const TokenStream& stream, int64_t begin, int64_t end, int64_t score_from) {
  Window w;
  w.tokens.assign(stream.ids.begin() + begin, stream.ids.begin() + end);
  if (!stream.byte_lengths.empty()) {
    w.byte_lengths.assign(stream.byte_lengths.begin() + begin, stream.byte_lengths.begin() + end);
  }
  w.score_from = static_cast<int32_t>(std::max<int64_t>(1, score_from));
  return w;
}

// [prefix] + stream[begin, end), scoring [score_from, 1 + end - begin).
Window PrefixedSlice(const TokenStream& stream, int32_t prefix_id, int64_t begin, int64_t end,
                     int64_t score_from) {
  Window w;
  w.tokens.reserve(static_cast<size_t>(end - begin + 1));
  w.tokens.push_back(prefix_id);
  w.tokens.insert(w.tokens.end(), stream.ids.begin() + begin, stream.ids.begin() + end);
  if (!stream.byte_lengths.empty()) {
    w.byte_lengths.reserve(w.tokens.size());
    w.byte_lengths.push_back(0);
    w.byte_lengths.insert(w.byte_lengths.end(), stream.byte_lengths.begin() + begin,
                          stream.byte_lengths.begin() + end);
  }
  w.score_from = static_cast<int32_t>(std::max<int64_t>(1, score_from));
  return w;
}

bool Full(const std::vector<Window>& windows, int64_t max_windows) {
  return max_windows > 0 && static_cast<int64_t>(windows.size()) >= max_windows;
}

}  // namespace

std::string MethodName(Method method) {
  switch (method) {
    case Method::kExl3:
      return "exl3";
    case Method::kGptq:
      return "gptq";
    case Method::kHf:
      return "hf";
    case Method::kLlamaCpp:
      return "llamacpp";
    case Method::kRolling:
      return "rolling";
    case Method::kChunks:
      return "chunks";
  }
  return "unknown";
}

absl::StatusOr<Method> ParseMethod(absl::string_view name) {
  for (Method m :
       {Method::kExl3, Method::kGptq, Method::kHf, Method::kLlamaCpp, Method::kRolling, Method::kChunks}) {
    if (name == MethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown method '", name, "' (expected exl3, gptq, hf, llamacpp, rolling or chunks)"));
}

bool MethodHasStride(Method method) { return method == Method::kExl3 || method == Method::kHf; }

int64_t DefaultCtx(Method method) { return method == Method::kLlamaCpp ? 512 : 2048; }

int64_t DefaultStride(Method method) { return MethodHasStride(method) ? 512 : 0; }

absl::Status ValidateParams(const MethodParams& params) {
  const std::string name = MethodName(params.method);
  if (params.ctx < 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ctx must be >= 2, got ", params.ctx));
  }
  if (params.method == Method::kLlamaCpp && (params.ctx < 4 || params.ctx % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llamacpp: ctx must be even and >= 4 (it scores ctx/2 - 1 tokens per chunk), got ", params.ctx));
  }
  if (MethodHasStride(params.method) && params.stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": stride must be >= 1, got ", params.stride));
  }
  if (params.max_windows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_windows must be >= 0 (0 = all), got ", params.max_windows));
  }
  return absl::OkStatus();
}

std::vector<Window> Exl3Windows(const TokenStream& stream, const MethodParams& params) {
  std::vector<Window> windows;
  const int64_t n = static_cast<int64_t>(stream.ids.size());
  // Python range(0, N - ctx, stride): a < N - ctx, so a window never ends exactly at N.
  for (int64_t a = 0; a < n - params.ctx; a += params.stride) {
    if (Full(windows, params.max_windows)) break;
    windows.push_back(Slice(stream, a, a + params.ctx, 1));
  }
  return windows;
}

std::vector<Window> GptqWindows(const TokenStream& stream, const MethodParams& params) {
  std::vector<Window> windows;
  const int64_t num = static_cast<int64_t>(stream.ids.size()) / params.ctx;
  for (int64_t i = 0; i < num; ++i) {
    if (Full(windows, params.max_windows)) break;
    windows.push_back(Slice(stream, i * params.ctx, (i + 1) * params.ctx, 1));
  }
  return windows;
}

std::vector<Window> HfWindows(const TokenStream& stream, const MethodParams& params) {
  std::vector<Window> windows;
  const int64_t n = static_cast<int64_t>(stream.ids.size());
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < n; begin += params.stride) {
    if (Full(windows, params.max_windows)) break;
    const int64_t end = std::min(begin + params.ctx, n);
    const int64_t target_len = end - prev_end;
    const int64_t len = end - begin;
    // Labels before len - target_len are masked; the window's first position is never predicted.
    if (len >= 2) windows.push_back(Slice(stream, begin, end, len - target_len));
    prev_end = end;
    if (end == n) break;
  }
  return windows;
}

std::vector<Window> LlamaCppWindows(const TokenStream& stream, const MethodParams& params,
                                    bool replace_first_with_bos, int32_t bos_id) {
  std::vector<Window> windows;
  const int64_t num = static_cast<int64_t>(stream.ids.size()) / params.ctx;
  for (int64_t c = 0; c < num; ++c) {
    if (Full(windows, params.max_windows)) break;
    Window w = Slice(stream, c * params.ctx, (c + 1) * params.ctx, params.ctx / 2 + 1);
    if (replace_first_with_bos) {
      w.tokens[0] = bos_id;
      if (!w.byte_lengths.empty()) w.byte_lengths[0] = 0;
    }
    windows.push_back(std::move(w));
  }
  return windows;
}

std::vector<Window> RollingWindows(const TokenStream& doc, int64_t ctx, int32_t prefix_id) {
  std::vector<Window> windows;
  const int64_t n = static_cast<int64_t>(doc.ids.size());
  if (n == 0) return windows;
  const int64_t first_len = std::min(ctx, n);
  windows.push_back(PrefixedSlice(doc, prefix_id, 0, first_len, 1));
  int64_t predicted = first_len;
  while (predicted < n) {
    const int64_t pred_len = std::min(n - predicted, ctx);
    const int64_t window_end = predicted + pred_len;
    const int64_t begin = window_end - ctx - 1;  // >= 0: predicted >= ctx after the first window
    windows.push_back(Slice(doc, begin, window_end, (window_end - begin) - pred_len));
    predicted += pred_len;
  }
  return windows;
}

std::vector<Window> BuildRollingWindows(const std::vector<TokenStream>& docs, const MethodParams& params,
                                        int32_t prefix_id) {
  std::vector<Window> windows;
  for (const TokenStream& doc : docs) {
    for (Window& w : RollingWindows(doc, params.ctx, prefix_id)) {
      if (Full(windows, params.max_windows)) return windows;
      windows.push_back(std::move(w));
    }
  }
  return windows;
}

std::vector<Window> ChunksWindows(const TokenStream& stream, const MethodParams& params, int32_t prefix_id) {
  std::vector<Window> windows;
  const int64_t n = static_cast<int64_t>(stream.ids.size());
  const int64_t chunk = params.ctx - 1;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    if (Full(windows, params.max_windows)) break;
    windows.push_back(PrefixedSlice(stream, prefix_id, begin, std::min(begin + chunk, n), 1));
  }
  return windows;
}

}  // namespace ppl
}  // namespace scored
