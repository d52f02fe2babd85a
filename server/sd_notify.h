// Readiness and stop notifications to the service manager, systemd's sd_notify protocol without
// libsystemd: one datagram of newline-separated VAR=VALUE assignments ("READY=1", "STOPPING=1") sent to
// the unix datagram socket named by $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace), which
// systemd sets for a Type=notify service (deploy/systemd/scored.service).
//
// Thread-safety: thread-safe (reads the environment; one socket per call).
#ifndef SCORED_SERVER_SD_NOTIFY_H_
#define SCORED_SERVER_SD_NOTIFY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace scored {

// Sends `state` (e.g. "READY=1") to $NOTIFY_SOCKET. OK without doing anything when NOTIFY_SOCKET is unset
// or empty (not started by a service manager that listens). INVALID_ARGUMENT when its value is neither an
// absolute path nor "@name", or too long for a unix socket address; UNAVAILABLE when the datagram cannot be
// sent (no such socket, nobody bound to it), with the errno text.
absl::Status NotifyServiceManager(absl::string_view state);

}  // namespace scored

#endif  // SCORED_SERVER_SD_NOTIFY_H_
