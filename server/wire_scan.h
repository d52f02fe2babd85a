// The raw-bytes side of the Scorer methods (Score, ScoreStream, Tokenize receive their requests as bytes):
// parsing a request, and when its bytes do not parse, saying why. gRPC's generated handlers would instead
// answer a unary call with an empty UNIMPLEMENTED and take a stream message that fails to parse as the
// client's half-close (server/README.md, "Requests that do not parse").
//
// Thread-safety: stateless functions.
#ifndef SCORED_SERVER_WIRE_SCAN_H_
#define SCORED_SERVER_WIRE_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace scored {

// What a walk over a message's wire bytes found; used only once the real parse has failed, to say why.
struct WireScan {
  std::string problem;  // the first problem found; empty: none found
  bool has_request_id = false;
  uint64_t request_id = 0;  // top-level field `request_id` (a varint), when it could be read
};

// The offset of the first byte of `s` that does not start a UTF-8 sequence as protobuf requires of a
// proto3 string (no overlong forms, no surrogates, nothing past U+10FFFF); npos when `s` is valid.
size_t FirstInvalidUtf8(std::string_view s);

// Walks `bytes` as a `type` message by the wire format alone, looking into nested message fields (at most
// 8 levels) and checking the UTF-8 of every string field (protobuf's parser refuses a proto3 string that is
// not UTF-8 but does not say which). `path` prefixes field names ("text." for ScoreRequest.text); `depth`
// is 0 at the top. Stops at the first bytes the wire format cannot explain (a truncated field, a bad tag or
// wire type). The first problem found goes to `scan`.
void ScanWire(std::string_view bytes, const google::protobuf::Descriptor& type, const std::string& path,
              int depth, WireScan* scan);

// Parses the received bytes as `message`. INVALID_ARGUMENT naming the problem when they do not parse
// ("request is not a valid ScoreRequest: invalid UTF-8 in field text.text (at byte 2 of the string)");
// `request_id` (may be null) then receives the message's field request_id if it could be read.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message,
                          uint64_t* request_id);

// Serializes a response for a raw-bytes method. Cannot fail for a message built in memory (only a size
// over 2 GiB could, far past any reply here).
grpc::ByteBuffer Serialize(const google::protobuf::Message& message);

}  // namespace scored

#endif  // SCORED_SERVER_WIRE_SCAN_H_
