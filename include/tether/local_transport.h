// The built-in `local` provider: the "sandbox" is a private directory on this
// machine and commands run as local child processes with pipes. The
// supervisor is installed and started through it exactly as on any other
// provider, so the local provider exercises the whole data path.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct LocalOptions {
  // Sandbox directory (private: 0700, ours, never a link); empty: the first
  // of $TETHER_LOCAL_ROOT, $XDG_RUNTIME_DIR/tether-local,
  // $TMPDIR/tether-local-<uid> (an absolute TMPDIR only) and
  // /tmp/tether-local-<uid>.
  std::string root;
  // A child started without a cwd runs here; empty: the directory this
  // process is in when the child starts (like a command run on this
  // machine), or / when that is gone. Never the private sandbox directory,
  // whose entries name every supervisor socket.
  std::string default_cwd;
};

// Creates (0700, checked) the sandbox directory and returns the transport.
absl::StatusOr<std::shared_ptr<Transport>> MakeLocalTransport(boost::asio::any_io_executor ex,
                                                              LocalOptions options);
// With default options. (An overload, not a default argument: g++ 12
// destroys default-argument temporaries twice inside coroutines.)
absl::StatusOr<std::shared_ptr<Transport>> MakeLocalTransport(boost::asio::any_io_executor ex);

}  // namespace tether
