// Several scored servers behind one client (scored-ppl, scored-load): the --server value names them, and
// every one must serve the same model before work is spread over them.
//
//   --server host:port                   one server (the name is resolved by gRPC, as before)
//   --server host1:port1,host2:port2     several, in this order
//   --server dns:///name:port            every address `name` resolves to (A and AAAA records, e.g. a
//                                        Kubernetes headless Service: one per ready pod), in resolver order
//
// Thread-safety: plain functions.
#ifndef SCORED_CLIENT_CONNECT_SERVERS_H_
#define SCORED_CLIENT_CONNECT_SERVERS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scored/v1/scorer.pb.h"

namespace scored {
namespace client {

// The gRPC targets `spec` names (see above), each "host:port" or "[v6]:port", duplicates dropped.
// INVALID_ARGUMENT for an empty spec or entry, or an entry without a port; UNAVAILABLE when a dns:/// name
// does not resolve (the resolver's message).
absl::StatusOr<std::vector<std::string>> ResolveServers(absl::string_view spec);

// OK when every info describes the same served computation as infos[0]: model, tokenizer and reference
// fingerprints, compute dtype, weight format (which names the KV-cache mode, e.g. "+kv-fp8"), backend, tensor
// parallelism, vocabulary and special tokens. Else FAILED_PRECONDITION naming the first differing server,
// the field and both values, e.g. "server 10.0.0.7:50051 differs from 10.0.0.6:50051 in model_fingerprint:
// 'ab12...' vs '9f3c...' (every server must serve the same model)". servers[i] describes infos[i].
absl::Status CheckSameModel(const std::vector<std::string>& servers,
                            const std::vector<scored::v1::ModelInfo>& infos);

}  // namespace client
}  // namespace scored

#endif  // SCORED_CLIENT_CONNECT_SERVERS_H_
