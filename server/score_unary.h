// The unary Scorer calls on the callback API: Score (parse, admit, tokenize a text on the pool, validate,
// charge the budget, queue on the batcher, answer from its callback) and Tokenize (parse, admit, tokenize on
// the pool, answer from there). Their contract is the ScorerService's (server/scorer_service.h).
//
// Each Start* creates a reactor that deletes itself in gRPC's OnDone, which can only follow its Finish;
// the reactor holds its connection slot and budget charge until then. `config` must outlive the call.
#ifndef SCORED_SERVER_SCORE_UNARY_H_
#define SCORED_SERVER_SCORE_UNARY_H_

#include "grpcpp/grpcpp.h"
#include "server/scorer_service.h"

namespace scored {

// `request` holds a serialized ScoreRequest, `response` receives a serialized ScoreResponse.
grpc::ServerUnaryReactor* StartScore(const ScorerService::Config* config,
                                     grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                                     grpc::ByteBuffer* response);

// `request` holds a serialized TokenizeRequest, `response` receives a serialized TokenizeResponse.
grpc::ServerUnaryReactor* StartTokenize(const ScorerService::Config* config,
                                        grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                                        grpc::ByteBuffer* response);

}  // namespace scored

#endif  // SCORED_SERVER_SCORE_UNARY_H_
