// The one place where absl::Status codes become gRPC status codes (and names for metrics labels).
// The numeric values of both enums follow google.rpc.Code; the mapping is still spelled out so that a
// code gRPC does not know can never leak out (it becomes UNKNOWN).
#ifndef SCORED_SERVER_GRPC_STATUS_H_
#define SCORED_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace scored {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);

// Same code, same message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... (the google.rpc.Code enum names), for metric labels and logs.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace scored

#endif  // SCORED_SERVER_GRPC_STATUS_H_
