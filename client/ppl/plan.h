// The evaluation plan of scored-ppl: a dataset tokenized and cut into windows by one method
// (DESIGN.md §5). Pure apart from the tokenize callback (no gRPC here).
//
// Which text each method tokenizes:
//   exl3      JoinRows(rows, drop_empty = true), with BOS
//   gptq, hf  JoinRows(rows, drop_empty = false), with BOS
//   llamacpp  whole_text, with BOS (and each chunk's first id replaced by BOS when BOS is added)
//   chunks    whole_text, without BOS; windows prefixed by BOS (EOS without a BOS)
//   rolling   each document, without BOS; windows prefixed by BOS (EOS without a BOS)
// "With BOS" prepends bos_id (byte length 0) when the tokenizer adds one by default and has one.
//
// Thread-safety: pure functions (the callback is called from the calling thread only).
#ifndef SCORED_CLIENT_PPL_PLAN_H_
#define SCORED_CLIENT_PPL_PLAN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ppl/dataset.h"
#include "client/ppl/windows.h"

namespace scored {
namespace ppl {

// The special-token facts the methods need (from GetModelInfo or a local tokenizer).
struct SpecialTokens {
  int32_t bos_id = -1;  // -1 if none
  int32_t eos_id = -1;  // -1 if none
  bool add_bos_by_default = false;
};

// Tokenizes text WITHOUT adding BOS/EOS; byte_lengths may be empty (bits-per-byte then unknown).
using TokenizeFn = std::function<absl::StatusOr<TokenStream>(const std::string& text)>;

struct Plan {
  std::vector<Window> windows;
  bool add_bos = false;          // whether "with BOS" prepended bos_id
  int32_t prefix_id = -1;        // rolling / chunks window prefix; -1 for the other methods
  int64_t num_documents = 0;     // documents tokenized (1 for the single-text methods)
  int64_t num_input_tokens = 0;  // tokens of the tokenized text(s), BOS included where added
};

// FAILED_PRECONDITION when rolling / chunks need a prefix and there is neither BOS nor EOS, or when the
// data gives no window at all (the message says how many tokens there were and what the method needs);
// INVALID_ARGUMENT from ValidateParams; tokenizer errors pass through.
absl::StatusOr<Plan> BuildPlan(const Dataset& dataset, const MethodParams& params,
                               const SpecialTokens& special, const TokenizeFn& tokenize);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_PLAN_H_
