// scored-ppl --dump_tokens FILE: every scored position of the run, one line each, to find where a
// quantization breaks (the windows and tokens whose NLL or KL divergence stands out) without a notebook.
//
// Tab-separated text with one header line, then the windows in index order, each window's scored positions
// in order:
//   window  position  token_id  nll            (without --kld)
//   window  position  token_id  nll  ref_nll  kld  same_top    (with --kld: R's NLL, KL(P_R || P_Q) in nats,
//                                                                1 when Q's and R's top-1 agree)
// `position` is the token's index in the window as sent (BOS included), so a window's positions start at its
// score_from; nll = -log P(token | the tokens before it), natural log, as the server computed it (float32,
// printed with 9 significant digits, which read back to the same float). Resumed windows (--journal) are
// written from the journal, with the same values.
// Thread-safety: a pure function (writes one file).
#ifndef SCORED_CLIENT_PPL_TOKEN_DUMP_H_
#define SCORED_CLIENT_PPL_TOKEN_DUMP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/ppl/plan.h"
#include "client/ppl/scorer_client.h"

namespace scored {
namespace ppl {

// Writes `path` (replaced if it exists) from the plan's windows and their scores (scores[i] is window i's).
// INVALID_ARGUMENT when a score's size does not match its window; INTERNAL naming the path on write errors.
absl::Status WriteTokenDump(const std::string& path, const Plan& plan, const std::vector<WindowScore>& scores,
                            bool kld);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_TOKEN_DUMP_H_
