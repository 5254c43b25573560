// The provider registry: each provider's name, its options (flags that take
// one value, as `--prefix 'ssh -T host'`), a parser that checks them, and a
// factory that makes its Transport. The CLI (`--provider NAME`) and the
// conformance runner iterate this list instead of naming providers.
//
//   const ProviderInfo* info = *FindProvider("command");
//   ProviderFlags flags = {{"--prefix", "ssh -T host"}};
//   absl::StatusOr<std::any> parsed = info->parse(flags);
//   auto transport = info->make(io.get_executor(), *parsed, {});
#pragma once

#include <any>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "tether/provider_info.h"
#include "tether/transport.h"

namespace tether {

// Every registered provider, in a stable order ("local" first: the default).
const std::vector<ProviderInfo>& Providers();

// The provider called `name`; kInvalidArgument naming the known ones.
absl::StatusOr<const ProviderInfo*> FindProvider(std::string_view name);

// True when some provider takes `flag` ("--prefix").
bool IsProviderFlag(std::string_view flag);

// Checks `flags` against `info` (a flag of another provider is refused,
// naming which one takes it) and parses them.
absl::StatusOr<std::any> ParseProviderFlags(const ProviderInfo& info, const ProviderFlags& flags);

// FindProvider + ParseProviderFlags + make.
absl::StatusOr<std::shared_ptr<Transport>> MakeProviderTransport(boost::asio::any_io_executor ex,
                                                                 std::string_view name,
                                                                 const ProviderFlags& flags,
                                                                 const ProviderHooks& hooks = {});

// For a program that owns its process (the CLI), first thing in main():
// the providers' libraries leave their global state to the process's end
// instead of freeing it in exit handlers that race with their own threads
// (OpenSSL's, against gRPC's: host/net/http.h). An embedder whose process
// is its own may call it too; nothing else depends on it.
void LeaveProviderLibrariesToExit();

// Splits a command line into words: whitespace separates, '...' and "..."
// quote, backslash escapes (outside single quotes). (`--prefix`'s syntax.)
absl::StatusOr<std::vector<std::string>> SplitShellWords(std::string_view line);

}  // namespace tether
