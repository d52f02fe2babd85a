// One scored-ppl run: connect, check the model, load and tokenize the data, cut windows, score them
// over ScoreStream and aggregate the report. The binary's main() parses flags into RunOptions and prints
// the Report; tests may call RunPpl directly.
//
// Errors (the message says what to do): UNAVAILABLE when the server cannot be reached within
// connect_timeout; FAILED_PRECONDITION when the server and the tokenizer disagree (vocab, BOS/EOS) or a
// window is longer than the server's max_seq_len / max_batch_tokens; INVALID_ARGUMENT for bad options;
// dataset, tokenizer and scoring errors pass through.
//
// Thread-safety: RunPpl may be called from any thread; it uses one helper thread while scoring.
#ifndef SCORED_CLIENT_PPL_RUN_H_
#define SCORED_CLIENT_PPL_RUN_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ppl/dataset.h"
#include "client/ppl/report.h"
#include "client/ppl/windows.h"

namespace scored {
namespace ppl {

struct RunOptions {
  std::string server;                 // "host:port"
  absl::Duration connect_timeout = absl::Seconds(10);
  std::string bearer_token;           // optional
  std::string data_path;
  Format format = Format::kWikiText;
  std::string separator;              // text format: document separator ("" = whole file)
  std::string text_field = "text";    // jsonl
  MethodParams method;
  int inflight = 16;                  // ScoreStream requests outstanding
  std::string tokenizer_dir;          // "" = tokenize through the server's Tokenize RPC
  bool progress = false;              // draw the progress line on `progress_out`
  std::FILE* progress_out = nullptr;
};

// Whether this build can tokenize locally (--tokenizer DIR).
bool LocalTokenizerAvailable();

absl::StatusOr<Report> RunPpl(const RunOptions& options);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_RUN_H_
