#include "engine/dist/control_channel.h"

#include <utility>

namespace scored::dist {

// Placeholder bodies: the implementation lands with the multi-process mode.
struct ControlChannel::Impl {
  int nnodes = 0;
  int node_rank = 0;
  std::string payload;
};

ControlChannel::ControlChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlChannel::~ControlChannel() = default;

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlChannel::Leader(absl::string_view, int, absl::string_view,
                                                                       const ControlChannelOptions&,
                                                                       const std::function<void(int)>&) {
  return absl::UnimplementedError("multi-process tensor parallelism is not built yet");
}

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlChannel::Follower(absl::string_view, int, int,
                                                                         const ControlChannelOptions&) {
  return absl::UnimplementedError("multi-process tensor parallelism is not built yet");
}

int ControlChannel::node_rank() const { return impl_->node_rank; }
int ControlChannel::nnodes() const { return impl_->nnodes; }
int ControlChannel::port() const { return 0; }
const std::string& ControlChannel::payload() const { return impl_->payload; }
absl::Status ControlChannel::Broadcast(absl::string_view) { return absl::UnimplementedError("not built yet"); }
absl::StatusOr<std::string> ControlChannel::Receive() { return absl::UnimplementedError("not built yet"); }
absl::Status ControlChannel::Shutdown() { return absl::OkStatus(); }
void ControlChannel::WatchPeers(std::function<void(const absl::Status&)>) {}

}  // namespace scored::dist
