// Tunnels: how the host reaches a supervisor over a transport.
//
// A tunnel owns everything about getting frames to the daemon and back over
// one kind of native channel: the supervisor command it runs (launch,
// bridge, relay), how the channel is wrapped (armored lines, polls), the
// out-of-band delivery of secrets, and how a refused launch reports itself.
// Process (host/process/process.cc) only asks it to launch or to reattach with a
// Hello, and gets back a Session with the handshake done:
//
//   auto tunnel = tunnel::MakeTunnel(transport);   // chosen from capabilities()
//   std::shared_ptr<Session> session;
//   auto welcome = co_await tunnel->Launch(target, launch_frame, hello, session);
//
// `session` is set as soon as one exists, so a caller that gives up (a
// deadline, an abort) can close it; it is valid only with an OK result.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "host/tunnel/session.h"
#include "tether/transport.h"
#include "host/tunnel/choose.h"
#include "host/tunnel/start_script.h"

namespace tether::tunnel {

// Where a process's supervisor lives in the sandbox.
struct Target {
  std::string supervisor;  // the installed binary (absolute)
  std::string state_dir;   // the process's private directory (absolute)
  // Tunnels that start by script (starts_by_script()): Launch runs this
  // StartScript (start_script.h) instead of `supervisor`, and the Welcome
  // names the supervisor and directory; `named` is a preinstalled path the
  // caller accepts on reattach.
  std::string start_script;
  std::string named;
  // When the script was made with an upload token (binary tunnels): the
  // binaries it may ask for inline ("upload-inline"), with their bytes.
  std::string upload_token;
  std::vector<UploadableSupervisor> uploadable;
};

class Tunnel {
 public:
  explicit Tunnel(Transport& transport, TunnelChoice choice) : transport_(transport), choice_(choice) {}
  virtual ~Tunnel() = default;
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

  const TunnelChoice& choice() const { return choice_; }
  // Launch finds the supervisor in the sandbox itself, in the same native
  // call (Target::start_script); a script that cannot launch ends Launch
  // with StartNeedStatus (start_script.h). Reattach checks the target's
  // paths in the sandbox. False: the caller probes and installs first.
  virtual bool starts_by_script() const { return false; }
  Transport& transport() const { return transport_; }

  // Runs the launch with `launch_frame` (an encoded Launch envelope) and
  // attaches with `hello` (its zstd flag is the tunnel's). A refused launch
  // is the supervisor's error as a Status (StatusFromWireError).
  virtual boost::asio::awaitable<absl::StatusOr<wire::Welcome>> Launch(const Target& target, std::string launch_frame,
                                                                       wire::Hello hello,
                                                                       std::shared_ptr<Session>& session) = 0;
  // Attaches to the running daemon of `target`. kNotFound when it is gone.
  virtual boost::asio::awaitable<absl::StatusOr<wire::Welcome>> Reattach(const Target& target, wire::Hello hello,
                                                                         std::shared_ptr<Session>& session) = 0;

 protected:
  Transport& transport_;
  TunnelChoice choice_;
};

// The tunnel ChooseTunnel() picks for `transport`'s capabilities.
absl::StatusOr<std::unique_ptr<Tunnel>> MakeTunnel(Transport& transport);

}  // namespace tether::tunnel
