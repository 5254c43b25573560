// A Transport that forwards every call to another one: the base of
// decorators that change one thing about a channel (delays, losses, damage)
// for tests and the conformance suite.
#pragma once

#include "tether/transport.h"

namespace tether::internal {

class ForwardingTransport : public Transport {
 public:
  // Holds `inner` (owned by a shared_ptr, as every transport is) for as
  // long as the decorator lives.
  explicit ForwardingTransport(Transport& inner) : owner_(inner.shared_from_this()), inner_(inner) {}
  // The inner channel's capabilities, except a direct connection (its
  // channels are Exec's, which a decorator sees).
  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c = inner_.capabilities();
    if (c.direct_connect) c = CapabilitiesOf(TunnelMode::kBinary);
    return c;
  }
  boost::asio::awaitable<absl::Status> Prepare() override { co_return co_await inner_.Prepare(); }
  std::string_view name() const override { return inner_.name(); }
  ScriptOverrides script_overrides() const override { return inner_.script_overrides(); }
  std::string sandbox_id() const override { return inner_.sandbox_id(); }
  boost::asio::any_io_executor executor() const override { return inner_.executor(); }
  boost::asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override { co_return co_await inner_.Probe(); }
  boost::asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    co_return co_await inner_.PutFile(std::move(path), bytes, mode);
  }

  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await inner_.Exec(std::move(argv));
  }

 protected:
  Transport& inner() const { return inner_; }

 private:
  std::shared_ptr<Transport> owner_;
  Transport& inner_;
};

}  // namespace tether::internal
