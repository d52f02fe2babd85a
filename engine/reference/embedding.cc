// Embedding: out[t, :] = table[tokens[t], :] (exact copy). Ids are checked before anything is written.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/reference/ops.h"

namespace scored::ref {

absl::Status Embedding(const float* table,     // [vocab_size, hidden_size]
                       const int32_t* tokens,  // [num_tokens]
                       int64_t num_tokens, int64_t vocab_size, int64_t hidden_size,
                       float* out) {  // [num_tokens, hidden_size]
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (tokens[t] < 0 || tokens[t] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[t], " at position ", t, " is outside [0, ", vocab_size, ")"));
    }
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::memcpy(out + t * hidden_size, table + static_cast<int64_t>(tokens[t]) * hidden_size,
                sizeof(float) * hidden_size);
  }
  return absl::OkStatus();
}

}  // namespace scored::ref
