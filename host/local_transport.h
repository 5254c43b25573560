// The built-in `local` provider: the "sandbox" is a private directory on this
// machine and commands run as local child processes with pipes. The
// supervisor is installed and started through it exactly as on any other
// provider, so the local provider exercises the whole data path.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "host/transport.h"

namespace tether {

struct LocalOptions {
  // Sandbox directory; empty: $TETHER_LOCAL_ROOT, else
  // $XDG_RUNTIME_DIR/tether-local, else /tmp/tether-local-<uid>.
  std::string root;
};

// Creates (0700, checked) the sandbox directory and returns the transport.
absl::StatusOr<std::unique_ptr<Transport>> MakeLocalTransport(boost::asio::any_io_executor ex,
                                                              LocalOptions options);
// With default options. (An overload, not a default argument: g++ 12
// destroys default-argument temporaries twice inside coroutines.)
absl::StatusOr<std::unique_ptr<Transport>> MakeLocalTransport(boost::asio::any_io_executor ex);

}  // namespace tether
