// Datasets of scored-ppl: text files read into the rows / documents / whole text the methods of
// DESIGN.md §5 consume. Pure (no gRPC, no tokenizer).
//
//   wikitext  rows = the file's lines with their "\n"; a whitespace-only line becomes "" (exactly the
//             HF wikitext-2-raw-v1 rows: 4358 rows for wiki.test.raw); the file is ONE document (its
//             whole text); whole_text = the file.
//   text      documents = the file split on `separator` (none: the whole file), each piece stripped of
//             surrounding whitespace, empty pieces dropped; rows = documents; whole_text = the file.
//   jsonl     one JSON object per non-blank line; documents = rows = each object's `text_field` string;
//             whole_text = the documents joined with "\n\n".
// "Whitespace" is Python's str.isspace() set (ASCII \t\n\v\f\r\x1c-\x1f and space, U+0085, U+00A0,
// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), so strip() and the whitespace-only row
// test agree with the Python tools whose numbers we reproduce.
//
// A gzip-compressed file of any of them is read as its text (".gz" is left out of the extension test).
// The data file itself (ReadDataFile, LoadDataset) must be a regular file (a symlink to one is fine) of at
// most `max_bytes` bytes, non-empty, and valid UTF-8: a directory, device (/dev/zero), FIFO or socket, an
// oversized file, and the first invalid byte sequence (named by its byte offset) are INVALID_ARGUMENT
// before anything is read or parsed, so a bad --data fails at once instead of reading forever.
//
// Thread-safety: pure functions.
#ifndef SCORED_CLIENT_PPL_DATASET_H_
#define SCORED_CLIENT_PPL_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace scored {
namespace ppl {

enum class Format { kWikiText, kText, kJsonl };

std::string FormatName(Format format);  // "wikitext", "text", "jsonl"
// INVALID_ARGUMENT for anything but those three names.
absl::StatusOr<Format> ParseFormat(absl::string_view name);
// Default by file extension, a final ".gz" left out: ".raw" -> wikitext, ".jsonl" / ".json" -> jsonl (so
// C4's published "c4-*.json.gz" shards are jsonl), anything else -> text.
Format FormatForPath(absl::string_view path);

struct Dataset {
  Format format = Format::kText;
  std::string whole_text;              // the text of llamacpp / chunks
  std::vector<std::string> rows;       // joined with "\n\n" by exl3 / gptq / hf
  std::vector<std::string> documents;  // rolling: one token stream per document
};

// Rows of a WikiText raw file (see above). A final line without "\n" is a row as it is.
std::vector<std::string> WikiTextRows(absl::string_view content);
// Python str.strip() over UTF-8 (invalid bytes are never whitespace).
absl::string_view StripWhitespace(absl::string_view text);
bool IsWhitespaceOnly(absl::string_view text);
// Pieces of `content` split on `separator` (empty: one piece), stripped, empty pieces dropped.
std::vector<std::string> SplitDocuments(absl::string_view content, absl::string_view separator);
// Documents of a JSONL text. INVALID_ARGUMENT naming the line for bad JSON, a missing field or a
// non-string field.
absl::StatusOr<std::vector<std::string>> JsonlDocuments(absl::string_view content,
                                                        const std::string& text_field);

// Builds a Dataset from file content. `separator` is used by text only, `text_field` by jsonl only.
absl::StatusOr<Dataset> ParseDataset(absl::string_view content, Format format, absl::string_view separator,
                                     const std::string& text_field);
// Default of --max_data_bytes: 1 GiB (WikiText-103's train split is 540 MB).
inline constexpr int64_t kDefaultMaxDataBytes = int64_t{1} << 30;

// Byte offset of the first byte of the first sequence that is not well-formed UTF-8 (RFC 3629: a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate U+D800..U+DFFF, a code point
// above U+10FFFF, or the bytes 0xC0, 0xC1, 0xF5..0xFF), or -1 when all of `text` is valid.
int64_t FirstInvalidUtf8(absl::string_view text);

// The bytes of the data file `path`. A gzip file (by its magic bytes, whatever its name; concatenated
// members too) is decompressed, its text bounded by `max_bytes` as well. NOT_FOUND when it does not
// exist; INVALID_ARGUMENT naming the path when it is not a regular file, is empty, holds more than
// `max_bytes` bytes (also when it grows past that while being read, or decompresses past it), is broken
// gzip, is a container scored-ppl does not read (Parquet, zstd, bzip2, xz: the message says how to convert
// it), or is not valid UTF-8 (the message gives the byte offset); INTERNAL on read errors.
absl::StatusOr<std::string> ReadDataFile(const std::string& path, int64_t max_bytes);

// ReadDataFile, then ParseDataset.
absl::StatusOr<Dataset> LoadDataset(const std::string& path, Format format, absl::string_view separator,
                                    const std::string& text_field, int64_t max_bytes = kDefaultMaxDataBytes);

// Joins all rows with "\n\n" (gptq, hf); with drop_empty, empty rows are left out first (exl3).
std::string JoinRows(const std::vector<std::string>& rows, bool drop_empty);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_DATASET_H_
