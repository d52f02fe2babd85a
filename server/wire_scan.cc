#include "server/wire_scan.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/slice.h"

namespace scored {
namespace {

// Nested messages deeper than this are not looked into (the request messages nest two levels).
constexpr int kMaxScanDepth = 8;

}  // namespace

size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if ((lead & 0xE0) == 0xC0) {
      len = 2, cp = lead & 0x1F, min_cp = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      len = 3, cp = lead & 0x0F, min_cp = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      len = 4, cp = lead & 0x07, min_cp = 0x10000;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

void ScanWire(std::string_view bytes, const google::protobuf::Descriptor& type, const std::string& path,
              int depth, WireScan* scan) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  const auto note = [scan](std::string problem) {
    if (scan->problem.empty()) scan->problem = std::move(problem);
  };
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    const int at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();  // 0 on a malformed or truncated tag
    const int number = static_cast<int>(tag >> 3);
    const uint32_t wire_type = tag & 7;
    const google::protobuf::FieldDescriptor* field = number > 0 ? type.FindFieldByNumber(number) : nullptr;
    const std::string name = field != nullptr ? path + field->name() : absl::StrCat(path, "#", number);
    bool ok = number > 0;
    if (ok && wire_type == 0) {  // varint
      uint64_t value = 0;
      ok = in.ReadVarint64(&value);
      if (ok && depth == 0 && field != nullptr && field->name() == "request_id") {
        scan->has_request_id = true;
        scan->request_id = value;
      }
    } else if (ok && wire_type == 1) {  // fixed64
      ok = in.Skip(8);
    } else if (ok && wire_type == 5) {  // fixed32
      ok = in.Skip(4);
    } else if (ok && wire_type == 2) {  // length-delimited: string, bytes, message or packed
      uint32_t length = 0;
      ok = in.ReadVarint32(&length) &&
           static_cast<uint64_t>(in.CurrentPosition()) + length <= static_cast<uint64_t>(bytes.size());
      if (ok) {
        const std::string_view value = bytes.substr(static_cast<size_t>(in.CurrentPosition()), length);
        ok = in.Skip(static_cast<int>(length));
        if (field != nullptr && field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
          const size_t bad = FirstInvalidUtf8(value);
          if (bad != std::string_view::npos) {
            note(absl::StrCat("invalid UTF-8 in field ", name, " (at byte ", bad, " of the string)"));
          }
        } else if (field != nullptr && field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
                   depth < kMaxScanDepth) {
          ScanWire(value, *field->message_type(), name + ".", depth + 1, scan);
        }
      }
    } else {
      ok = false;  // groups (3, 4) are not used by proto3; 6 and 7 do not exist
    }
    if (!ok) {
      note(absl::StrCat("truncated or malformed protobuf at byte ", at,
                        path.empty() ? "" : absl::StrCat(" of field ", path.substr(0, path.size() - 1)),
                        " (field ", name, ")"));
      return;
    }
  }
}

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message,
                          uint64_t* request_id) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices)
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  WireScan scan;
  ScanWire(bytes, *message->GetDescriptor(), "", 0, &scan);
  if (request_id != nullptr && scan.has_request_id) *request_id = scan.request_id;
  const std::string& type = message->GetDescriptor()->name();
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", type, ": ",
                   scan.problem.empty() ? absl::StrCat("the bytes do not parse as a ", type) : scan.problem));
}

grpc::ByteBuffer Serialize(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &buffer, &own_buffer)
      .IgnoreError();
  return buffer;
}

}  // namespace scored
