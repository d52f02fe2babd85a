// A check, before the model loads, that a listen address's port is free: a second daemon started on a
// taken --listen or --openai_listen port fails in milliseconds, naming the flag, instead of after a load
// that may take minutes (and again on every supervisor restart). It binds each address `listen`
// resolves to (SO_REUSEADDR as gRPC sets it, so a port in TIME_WAIT is free) and closes the socket at once;
// the real listener binds later, so a program that takes the port in between is still found then.
// Port 0 (pick one) always passes; so does an address that cannot be probed here (an unresolvable host,
// an address not on this machine): the listener itself reports those.
// Thread-safety: a pure function (it opens and closes sockets).
#ifndef SCORED_SERVER_LISTEN_PROBE_H_
#define SCORED_SERVER_LISTEN_PROBE_H_

#include <string>

#include "absl/status/status.h"

namespace scored {

// UNAVAILABLE "<flag> <listen>: the port is already in use ..." when an address of `listen` ("host:port",
// "[v6]:port") is taken; OK otherwise.
absl::Status ProbeListenPort(const std::string& flag, const std::string& listen);

}  // namespace scored

#endif  // SCORED_SERVER_LISTEN_PROBE_H_
