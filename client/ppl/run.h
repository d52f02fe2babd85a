// One scored-ppl run: connect, check the model, load and tokenize the data, cut windows, score them
// over ScoreStream and aggregate the report. The binary's main() parses flags into RunOptions and prints
// the Report; tests may call RunPpl directly.
//
// The data file is read and checked (dataset.h: a regular file, at most max_data_bytes, valid UTF-8) before
// the server is contacted.
// Errors (the message says what to do): UNAVAILABLE when the server cannot be reached within
// connect_timeout; FAILED_PRECONDITION when the server and the tokenizer disagree (vocab, BOS/EOS) or a
// window is longer than the server's max_seq_len / max_batch_tokens; INVALID_ARGUMENT for bad options;
// dataset, tokenizer and scoring errors pass through. With a journal, FAILED_PRECONDITION when the journal
// belongs to another run (the message names the differing field).
//
// Results are aggregated in window-index order once every window is scored (not in completion order),
// so the report does not depend on timing, retries or resuming from a journal: a resumed run reports
// the same ppl / nll_mean / nll_stderr / bits_per_byte / counts, bit for bit, as an uninterrupted one.
// Throughput (tokens_per_second, the progress line's tok/s and ETA) counts only the windows this run
// scored, not those taken from the journal.
//
// --kld (kld.h): every Score request sets want_reference, and the report adds the comparison with the
// server's reference model over the same windows and scored positions. A server whose ModelInfo has no
// `reference` is refused before anything is tokenized or scored: FAILED_PRECONDITION marked as a usage
// error (IsUsageError: the command line asked for something this server cannot do; scored-ppl exits 2).
// A --kld journal records the reference values of every window; its run identity adds "kld" and the
// reference's fingerprint, and a run that comes back to a server with another reference fails.
//
// --save_reference FILE / --kld --reference_file FILE (reference_run.h, issue 35): KL divergence when R and Q
// do not fit on the GPUs together. Saving, the server serves R and the run stores R's top-K of every window
// (printing the file's size first; an interrupted save resumes from FILE.partial); the report is R's
// perplexity and names the file. Comparing, the server serves Q (a reference model on it is not used), the
// file must have been saved for this run (same tokenizer, data, method, parameters and windows:
// FAILED_PRECONDITION naming the first differing field), and the --kld report is the one-pass one with each
// KLD statistic an estimate within printed bounds (kld.h). Neither combines with --journal (INVALID_ARGUMENT
// marked as a usage error); --save_reference does not combine with --kld, --reference_file needs it.
//
// Several servers (`server` a comma list or dns:///NAME:PORT, client/connect/servers.h): every one is
// connected and its ModelInfo read first; FAILED_PRECONDITION naming the server and the field unless they all
// serve the same model (CheckSameModel), and every window must fit each server's limits. Tokenization goes
// to the first server. Then one ScoreStream per server takes windows from a shared pool (WindowPool:
// `inflight` outstanding per server, the next window to the first free slot); a server whose stream fails
// (IsServerLost: killed, draining, unreachable) has its unanswered windows moved to the others, with a line
// on `progress_out`; UNAVAILABLE once no server is left, any other error at once. A lost server is not
// reconnected (the retry_* options apply to one server only). Lines on `progress_out` name each server's
// first answered window and, at the end, the windows each server answered. The results are aggregated in
// window order as above, so they equal a one-server run's.
//
// Thread-safety: RunPpl may be called from any thread; it uses one helper thread while scoring (one per
// server, plus one writer each, with several servers).
#ifndef SCORED_CLIENT_PPL_RUN_H_
#define SCORED_CLIENT_PPL_RUN_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ppl/dataset.h"
#include "client/ppl/report.h"
#include "client/ppl/windows.h"

namespace scored {
namespace ppl {

// How far a run is, readable from any thread (scored-ppl's interrupt message): windows of the plan, and
// those scored or taken from the journal.
struct RunCounters {
  std::atomic<int64_t> windows_total{0};
  std::atomic<int64_t> windows_done{0};
};

struct RunOptions {
  std::string server;  // "host:port", or several: "host:port,host:port" / "dns:///name:port" (above)
  absl::Duration connect_timeout = absl::Seconds(10);
  std::string bearer_token;  // optional
  // TLS: on when tls_ca_path or tls_cert_path is set (PEM files; "" CA = the system's roots);
  // tls_cert_path + tls_key_path (both or neither): client certificate for mTLS.
  std::string tls_ca_path;
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string data_path;
  int64_t max_data_bytes = kDefaultMaxDataBytes;  // larger data files are refused (dataset.h)
  Format format = Format::kWikiText;
  std::string separator;            // text format: document separator ("" = whole file)
  std::string text_field = "text";  // jsonl
  MethodParams method;
  // --ctx / --stride not given: the method's defaults, which RunPpl shortens to what every server accepts
  // (its max_seq_len; rolling windows are ctx + 1 ids), saying so on stderr.
  bool ctx_is_default = false;
  bool stride_is_default = false;
  std::string label;                  // the report's label ("" = the model folder's name, report.h)
  int inflight = 16;                  // ScoreStream requests outstanding
  std::string tokenizer_dir;          // "" = tokenize through the server's Tokenize RPC
  bool progress = false;              // draw the progress line on `progress_out`
  std::FILE* progress_out = nullptr;  // also gets the "waiting for server" lines (nullptr: stderr)
  // --journal: "" = none. See journal.h; sync every journal_sync_every records.
  std::string journal_path;
  // --dump_tokens: every scored position's NLL (and with --kld R's NLL, the KLD and top-1 agreement) to this
  // file once the run is done (client/ppl/token_dump.h); "" = none.
  std::string dump_tokens_path;
  int journal_sync_every = 1;
  bool journal_strict = false;      // a record that fails its checks refuses the journal instead of rescoring
  RunCounters* counters = nullptr;  // not owned; updated as windows finish (nullptr: none)

  // Retries while the server is UNAVAILABLE during scoring (killed, restarting): reconnect with
  // exponential backoff from retry_initial up to retry_max per wait, re-send the unfinished windows,
  // and give up once retry_timeout has passed without a window finishing (0 = no retries). Other
  // errors, and a restarted server with another model fingerprint, are fatal.
  absl::Duration retry_timeout = absl::Seconds(300);
  absl::Duration retry_initial = absl::Milliseconds(500);
  absl::Duration retry_max = absl::Seconds(10);
  bool kld = false;  // --kld: compare with the server's reference model (see above)
  // --save_reference FILE (K = reference_top_k) / --reference_file FILE (with kld); "" = none.
  std::string save_reference_path;
  int32_t reference_top_k = 1024;  // kDefaultReferenceTopK
  std::string reference_file_path;
};

// Whether `status` is an error of the command line found only once the server answered (--kld without a
// reference model): scored-ppl exits 2 on it, like on a bad flag.
bool IsUsageError(const absl::Status& status);

absl::StatusOr<Report> RunPpl(const RunOptions& options);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_RUN_H_
