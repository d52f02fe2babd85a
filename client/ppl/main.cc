// scored-ppl: perplexity of the model a `scored` server holds, by one of the window methods of
// client/ppl/windows.h (README.md, "Using it", compares them).
//
//   scored-ppl --server 127.0.0.1:50051 --data wiki.test.raw --method exl3 --ctx 2048 --stride 512
//   scored-ppl ... --journal run.journal   # rerun the same command after a crash to resume
//   scored-ppl --server 10.0.0.6:50051,10.0.0.7:50051 ...  # one run over several servers (same model)
//   scored-ppl compare --csv table.csv a.json b.json  # a markdown table (and CSV) across --json reports
//   scored-ppl ... --tls_ca ca.pem --tls_cert client.pem --tls_key client.key --auth_token_file token
//   scored-ppl --server R_HOST:PORT ... --save_reference r.ref       # R alone, then Q against the file:
//   scored-ppl --server Q_HOST:PORT ... --kld --reference_file r.ref
//
// Prints the report to stdout (and as JSON to --json FILE). Exit status 0 on success, 1 on any error
// (message on stderr), 2 on a bad command line: an unknown flag, a flag value that does not parse or is out
// of range, or a positional argument (all of them named on stderr), --kld against a server without a
// reference model, or stored-reference flags that do not go together.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command_line.h"
#include "cli/flags_help.h"
#include "client/connect/security.h"
#include "client/ppl/compare.h"
#include "client/ppl/local_server.h"
#include "client/ppl/report.h"
#include "client/ppl/run.h"

ABSL_FLAG(
    std::string, model, "",
    "score with a scored of this run's own: start the scored binary on this model folder (or cached hub "
    "id) on 127.0.0.1, score, stop it (instead of --server; client/ppl/local_server.h)");
ABSL_FLAG(std::string, scored_args, "",
          "with --model: more scored flags, space-separated, e.g. '--backend=cpu --max_seq_len=2049'");
ABSL_FLAG(std::string, scored_binary, "",
          "with --model: the scored to run (default: beside scored-ppl, the build tree's, or on PATH)");
ABSL_FLAG(
    std::string, server, "127.0.0.1:50051",
    "scored address host:port; several servers serving the same model: a comma list host:port,host:port "
    "or dns:///NAME:PORT (every address NAME resolves to): windows are spread over all of them, a failed "
    "server's windows move to the others, and the report equals a one-server run (README \"Many "
    "replicas\")");
ABSL_FLAG(
    std::string, data, "",
    "dataset file (required): a regular file of valid UTF-8 of at most --max_data_bytes, or gzip of one "
    "(a directory, device, FIFO, larger file or invalid UTF-8 is refused, naming the byte offset; "
    "Parquet / zstd / bzip2 / xz too, saying how to convert them)");
ABSL_FLAG(int64_t, max_data_bytes, int64_t{1} << 30, "largest --data file accepted, bytes (default 1 GiB)");
ABSL_FLAG(std::string, format, "",
          "wikitext | text | jsonl (default by extension, a final .gz left out: .raw -> wikitext, "
          ".jsonl/.json -> jsonl, else text)");
ABSL_FLAG(std::string, separator, "",
          "text format: document separator, e.g. '<|endoftext|>' (default: the whole file is one "
          "document); C escapes are decoded ('\\n\\n' is two newlines); each piece is stripped of "
          "surrounding whitespace");
ABSL_FLAG(std::string, text_field, "text", "jsonl format: the field holding each document's text");
ABSL_FLAG(
    std::string, method, "exl3",
    "exl3 | gptq | hf | llamacpp | rolling | chunks: the window method (README.md \"Using it\" compares "
    "them; client/ppl/windows.h defines them)");
ABSL_FLAG(int64_t, ctx, 0,
          "tokens per window, BOS included (0 = the method's default: llamacpp 512, others 2048)");
ABSL_FLAG(int64_t, stride, 0, "exl3 / hf: window stride (0 = default 512)");
ABSL_FLAG(int64_t, max_windows, 0, "score only the first N windows (0 = all)");
ABSL_FLAG(int32_t, inflight, 16,
          "ScoreStream requests kept outstanding (enough to keep the server's batcher full)");
ABSL_FLAG(std::string, json, "", "also write the report as JSON to this file");
ABSL_FLAG(
    std::string, dump_tokens, "",
    "write every scored position to this file, tab-separated: window, position, token_id, nll (with --kld "
    "also ref_nll, kld, same_top), to find where a quantization breaks (client/ppl/token_dump.h)");
ABSL_FLAG(std::string, label, "",
          "the report's name for this run, e.g. in `scored-ppl compare` tables (default: the name of the "
          "model folder the server loaded)");
ABSL_FLAG(std::string, tokenizer, "",
          "tokenize locally with the tokenizer files in this folder (default: the server's Tokenize RPC)");
ABSL_FLAG(bool, quiet, false, "no progress line");
ABSL_FLAG(bool, progress, false, "draw the progress line even when stderr is not a terminal");
ABSL_FLAG(double, connect_timeout_s, 10.0, "seconds to wait for the server to accept the connection");
// --auth_token, --auth_token_file, --tls_ca, --tls_cert, --tls_key: client/connect/security.h.
ABSL_FLAG(std::string, journal, "",
          "append every finished window to this file and, when it already holds windows of the same run "
          "(method, params, data file, model, tokenizer), skip them: an interrupted run resumes and reports "
          "exactly what an uninterrupted one would (its tokens/s and ETA count only the windows it scores)");
ABSL_FLAG(int32_t, journal_sync_every, 1,
          "fdatasync the journal every N windows (1: every window is durable; larger N: fewer syncs, up to "
          "N - 1 windows rescored after a power loss)");
ABSL_FLAG(bool, journal_strict, false,
          "refuse a journal holding a record that fails its checks (its checksum, or its sum against its "
          "per-token values) instead of scoring that window again");
ABSL_FLAG(bool, kld, false,
          "also compare with the server's reference model (scored --reference_model R): every request asks "
          "want_reference and the report adds PPL(R), ln(PPL(Q)/PPL(R)), the NLL correlation, mean KLD and "
          "its percentiles, same top p, delta p and |delta logprob| (llama-perplexity's KL-divergence "
          "statistics) over the same windows; exit 2 when the server has no reference model");
ABSL_FLAG(std::string, save_reference, "",
          "run the server's model as the reference R and store, per scored position, R's target logprob, "
          "entropy and top-K logprobs (K = --reference_top_k) in this file, for a later --kld "
          "--reference_file run of the quant when both models do not fit on the GPUs together; prints the "
          "file's size first; an interrupted save resumes from FILE.partial (client/ppl/reference_file.h)");
ABSL_FLAG(int32_t, reference_top_k, 1024,
          "with --save_reference: K, the ids stored per position (1..1024, at most the vocabulary; 16 + 8 K "
          "bytes a position: 1024 keeps WikiText-2 test at ~2.4 GB for windows of 2048; a larger K tightens "
          "the KLD bounds)");
ABSL_FLAG(
    std::string, reference_file, "",
    "with --kld: compare with the reference stored in this file (--save_reference, same tokenizer, data, "
    "method and windows) instead of the server's reference model: the same report, PPLs, dp, same top "
    "and |dlogprob| exact, each KLD statistic an estimate with its bounds (client/ppl/stored_kld.h)");
ABSL_FLAG(double, retry_timeout_s, 300.0,
          "while the server is unavailable during scoring, reconnect with backoff (0.5 s doubling to 10 s) "
          "and re-send the unfinished windows, for up to this many seconds without progress (0 = fail at "
          "once)");

namespace {

constexpr char kUsage[] =
    "perplexity of the model served by scored.\n"
    "  scored-ppl --server HOST:PORT --data wiki.test.raw --method exl3 [--ctx 2048 --stride 512]\n"
    "  scored-ppl compare [--csv OUT] [--force] REPORT.json...   (a table across --json reports; compare\n"
    "    --help says more)\n"
    "Exit status: 0 done, 1 an error (on stderr), 2 a bad command line (unknown flag, bad value, a\n"
    "positional argument: scored-ppl takes only flags; --kld against a server without a reference\n"
    "model; stored-reference flags that do not go together).\n"
    "KL divergence when the quant Q and its original R do not fit on the GPUs together:\n"
    "  scored-ppl --server R_HOST:PORT --data wiki.test.raw ... --save_reference r.ref\n"
    "  scored-ppl --server Q_HOST:PORT --data wiki.test.raw ... --kld --reference_file r.ref";

// --help's sections (cli/flags_help.h); a flag left out still shows, under "Other flags".
const std::vector<scored::cli::FlagGroup>& HelpGroups() {
  static const auto* const groups = new std::vector<scored::cli::FlagGroup>{
      {"Data", {"data", "format", "separator", "text_field", "max_data_bytes", "tokenizer"}},
      {"Method", {"method", "ctx", "stride", "max_windows", "kld"}},
      {"KL divergence against a stored reference", {"save_reference", "reference_top_k", "reference_file"}},
      {"Server connection", {"server", "inflight", "connect_timeout_s", "retry_timeout_s"}},
      {"A server of its own (instead of --server)", {"model", "scored_args", "scored_binary"}},
      {"TLS and authentication", {"tls_ca", "tls_cert", "tls_key", "auth_token", "auth_token_file"}},
      {"Output", {"json", "label", "dump_tokens", "quiet", "progress"}},
      {"Resume", {"journal", "journal_sync_every", "journal_strict"}},
  };
  return *groups;
}

// The command line's problems (cli/command_line.h), with hints for llama-perplexity's and lm-eval's
// spellings.
absl::Status CheckCommandLine(int argc, char** argv) {
  const scored::cli::CommandLineRules rules{"scored-ppl takes only flags, e.g. --data FILE",
                                            {{"f", "data"},
                                             {"file", "data"},
                                             {"c", "ctx"},
                                             {"ctx-size", "ctx"},
                                             {"max_length", "ctx"},
                                             {"chunks", "max_windows"},
                                             {"host", "server"},
                                             {"port", "server"},
                                             {"m", "model"}}};
  return scored::cli::CheckCommandLine(argc, argv, rules);
}

absl::StatusOr<scored::ppl::RunOptions> OptionsFromFlags() {
  using scored::ppl::Format;
  using scored::ppl::Method;
  scored::ppl::RunOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.data_path = absl::GetFlag(FLAGS_data);
  if (o.data_path.empty()) return absl::InvalidArgumentError("--data FILE is required");
  o.max_data_bytes = absl::GetFlag(FLAGS_max_data_bytes);
  if (o.max_data_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--max_data_bytes must be >= 1, got ", o.max_data_bytes));
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format.empty()) {
    o.format = scored::ppl::FormatForPath(o.data_path);
  } else {
    auto f = scored::ppl::ParseFormat(format);
    if (!f.ok()) return f.status();
    o.format = *f;
  }
  std::string unescape_error;
  if (!absl::CUnescape(absl::GetFlag(FLAGS_separator), &o.separator, &unescape_error)) {
    return absl::InvalidArgumentError(absl::StrCat("--separator: ", unescape_error));
  }
  o.text_field = absl::GetFlag(FLAGS_text_field);
  auto method = scored::ppl::ParseMethod(absl::GetFlag(FLAGS_method));
  if (!method.ok()) return method.status();
  o.method.method = *method;
  const int64_t ctx = absl::GetFlag(FLAGS_ctx);
  const int64_t stride = absl::GetFlag(FLAGS_stride);
  o.method.ctx = ctx > 0 ? ctx : scored::ppl::DefaultCtx(*method);
  o.ctx_is_default = ctx == 0;
  o.stride_is_default = stride == 0;
  if (stride != 0 && !scored::ppl::MethodHasStride(*method)) {
    return absl::InvalidArgumentError(absl::StrCat("--stride is not used by method ",
                                                   scored::ppl::MethodName(*method), " (only exl3 and hf)"));
  }
  // The default stride never exceeds --ctx; a larger --stride would leave tokens between windows unscored.
  o.method.stride = stride > 0 ? stride : std::min(scored::ppl::DefaultStride(*method), o.method.ctx);
  if (stride < 0) return absl::InvalidArgumentError("--stride must be >= 1");
  if (stride > o.method.ctx) {
    return absl::InvalidArgumentError(absl::StrCat("--stride ", stride, " is larger than --ctx ",
                                                   o.method.ctx,
                                                   ": the tokens between windows would never be scored"));
  }
  if (ctx < 0) return absl::InvalidArgumentError("--ctx must be >= 2");
  o.method.max_windows = absl::GetFlag(FLAGS_max_windows);
  o.label = absl::GetFlag(FLAGS_label);
  o.inflight = absl::GetFlag(FLAGS_inflight);
  if (o.inflight < 1) return absl::InvalidArgumentError("--inflight must be >= 1");
  o.tokenizer_dir = absl::GetFlag(FLAGS_tokenizer);
  const double timeout = absl::GetFlag(FLAGS_connect_timeout_s);
  if (!(timeout > 0)) return absl::InvalidArgumentError("--connect_timeout_s must be > 0");
  o.connect_timeout = absl::Seconds(timeout);
  const scored::client::SecurityFlags security = scored::client::SecurityFlagsFromCommandLine();
  absl::StatusOr<std::string> token =
      scored::client::BearerToken(security.auth_token, security.auth_token_file);
  if (!token.ok()) return token.status();
  o.bearer_token = *token;
  o.tls_ca_path = security.tls_ca;
  o.tls_cert_path = security.tls_cert;
  o.tls_key_path = security.tls_key;
  o.journal_path = absl::GetFlag(FLAGS_journal);
  o.dump_tokens_path = absl::GetFlag(FLAGS_dump_tokens);
  o.journal_sync_every = absl::GetFlag(FLAGS_journal_sync_every);
  if (o.journal_sync_every < 1) return absl::InvalidArgumentError("--journal_sync_every must be >= 1");
  o.journal_strict = absl::GetFlag(FLAGS_journal_strict);
  struct stat journal_stat;
  if (!o.journal_path.empty() && ::stat(o.journal_path.c_str(), &journal_stat) == 0 &&
      !S_ISREG(journal_stat.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--journal ", o.journal_path, " is not a regular file (a directory, device, FIFO or socket)"));
  }
  const double retry = absl::GetFlag(FLAGS_retry_timeout_s);
  if (!(retry >= 0)) return absl::InvalidArgumentError("--retry_timeout_s must be >= 0");
  o.retry_timeout = absl::Seconds(retry);
  o.kld = absl::GetFlag(FLAGS_kld);
  o.save_reference_path = absl::GetFlag(FLAGS_save_reference);
  o.reference_top_k = absl::GetFlag(FLAGS_reference_top_k);
  if (o.reference_top_k < 1 || o.reference_top_k > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference_top_k must be in [1, 1024], got ", o.reference_top_k));
  }
  o.reference_file_path = absl::GetFlag(FLAGS_reference_file);
  o.progress = !absl::GetFlag(FLAGS_quiet) && (absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO));
  o.progress_out = stderr;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "compare") {
    return scored::ppl::CompareCommand(std::vector<std::string>(argv + 2, argv + argc), stdout, stderr);
  }
  scored::cli::SetUsageConfig("scored-ppl");
  absl::SetProgramUsageMessage(kUsage);
  if (scored::cli::WantsHelp(argc, argv)) {
    std::fputs(scored::cli::GroupedHelp(kUsage, HelpGroups(), __FILE__).c_str(), stdout);
    return 0;
  }
  if (const absl::Status command_line = CheckCommandLine(argc, argv); !command_line.ok()) {
    std::fprintf(stderr, "scored-ppl: %s (see --help)\n", std::string(command_line.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);

  auto options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "scored-ppl: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  // --model: this run's own scored, started before any thread (it forks) and stopped when main returns.
  std::unique_ptr<scored::ppl::LocalServer> local;
  if (const std::string model = absl::GetFlag(FLAGS_model); !model.empty()) {
    if (absl::GetFlag(FLAGS_server) != "127.0.0.1:50051") {
      std::fprintf(stderr,
                   "scored-ppl: give --model (a scored of its own) or --server, not both (see --help)\n");
      return 2;
    }
    scored::ppl::LocalServer::Options local_options;
    local_options.model = model;
    local_options.extra_args = absl::StrSplit(absl::GetFlag(FLAGS_scored_args), ' ', absl::SkipEmpty());
    local_options.binary = absl::GetFlag(FLAGS_scored_binary);
    auto started = scored::ppl::LocalServer::Start(local_options);
    if (!started.ok()) {
      std::fprintf(stderr, "scored-ppl: %s\n", started.status().ToString().c_str());
      return 1;
    }
    local = *std::move(started);
    options->server = local->address();
  }
  // SIGINT / SIGTERM: say how far the run got and how to keep it next time, then exit 128 + the signal.
  // Blocked here, before RunPpl starts any thread, so that only the waiting thread below receives them.
  static scored::ppl::RunCounters counters;
  options->counters = &counters;
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  std::thread([stops, journal = options->journal_path] {
    int sig = 0;
    if (sigwait(&stops, &sig) != 0) return;
    const long long done = counters.windows_done.load(), total = counters.windows_total.load();
    if (!journal.empty()) {
      std::fprintf(stderr,
                   "\nscored-ppl: interrupted after %lld of %lld windows; they are in the journal %s: rerun "
                   "the same command to resume\n",
                   done, total, journal.c_str());
    } else {
      std::fprintf(stderr,
                   "\nscored-ppl: interrupted after %lld of %lld windows, which are lost; with --journal "
                   "FILE a rerun resumes where a run stopped\n",
                   done, total);
    }
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }).detach();
  auto report = scored::ppl::RunPpl(*options);
  if (!report.ok()) {
    if (scored::ppl::IsUsageError(report.status())) {
      std::fprintf(stderr, "scored-ppl: %s\n", std::string(report.status().message()).c_str());
      return 2;
    }
    std::fprintf(stderr, "scored-ppl: %s\n", report.status().ToString().c_str());
    return 1;
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    const absl::Status written = scored::ppl::WriteJsonReport(*report, json_path);
    if (!written.ok()) {
      std::fprintf(stderr, "scored-ppl: %s\n", written.ToString().c_str());
      return 1;
    }
  }
  std::fputs(scored::ppl::ReportToText(*report).c_str(), stdout);
  return 0;
}
