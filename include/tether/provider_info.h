// A provider's entry in the registry (tether/providers.h): its name, its
// options (flags that take one value, as `--prefix 'ssh -T host'`), a parser
// that checks them, and a factory that makes its Transport. What a provider
// defines (host/registry/providers.cc, host/native/<p>/<p>_options.cc); the
// registry lists them.
#pragma once

#include <any>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

// Provider options as given: flag ("--prefix") and value, in order.
using ProviderFlags = std::vector<std::pair<std::string, std::string>>;

struct ProviderOption {
  std::string_view flag;  // "--prefix"
  std::string_view help;  // one line
};

// What a caller can hand every provider's factory.
struct ProviderHooks {
  // Called as a supervisor upload proceeds (bytes sent, total); may be empty.
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

struct ProviderInfo {
  std::string_view name;  // "local", "command"
  std::string_view help;  // a few lines for the usage text
  std::vector<ProviderOption> options;
  // The sandbox is this machine (a relative cwd means ours).
  bool same_machine = false;
  // Checks a complete set of this provider's options (only its own flags;
  // see ParseProviderFlags) and returns them parsed for `make`.
  std::function<absl::StatusOr<std::any>(const ProviderFlags&)> parse;
  std::function<absl::StatusOr<std::shared_ptr<Transport>>(boost::asio::any_io_executor, const std::any&,
                                                           const ProviderHooks&)>
      make;
};

}  // namespace tether
