// The checks every native provider's factory makes of its options, one
// definition each: where the environment gives a default, what an id or
// an API key may hold, what an API URL must be. (The flags themselves are
// checked once for every provider by host/support/typed_provider.h.)
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "host/net/http.h"

namespace tether::native {

// The environment variable `name`, or "" when it is not set.
std::string Env(const char* name);

// Whether `value` may go into an HTTP header as it is (an API key, an
// organization id): no space and no control character.
bool HeaderSafe(std::string_view value);

// Whether `id` is 1..128 letters, digits, '-', '_' or characters of `extra`.
bool PlainId(std::string_view id, std::string_view extra = {});

// The sandbox's id, as every factory checks it: required (given as
// `usage`, "--sandbox ID"), at most 128 bytes, PlainId. `noun` names it in
// the message ("sandbox id", "devbox id"); kInvalidArgument naming `who`:
//   boat: a sandbox id is required (--sandbox ID)
//   boat: the sandbox id is too long (128 at most)
//   boat: a sandbox id is letters, digits, '-' and '_'
absl::Status CheckId(std::string_view who, std::string_view noun, std::string_view usage, std::string_view id,
                     std::string_view extra = {});

// The account's API key: `key` as given, else $`env`. Neither:
// kUnauthenticated "<who>: set <env> to your API key"; a space or a control
// character: kInvalidArgument (it goes into a header), the key not quoted.
absl::Status ApiKeyOrEnv(std::string_view who, const char* env, std::string& key);

// An API URL that parses and is https:// (or http:// to a loopback
// address); kInvalidArgument naming `who` ("boat") otherwise.
absl::StatusOr<net::Url> ParseApiUrl(std::string_view who, std::string_view url);

// Client options for that API URL (ParseApiUrl), trusting `ca_file` (may
// be empty) besides the system's CAs.
absl::StatusOr<net::ClientOptions> ApiClientOptions(std::string_view who, std::string_view url,
                                                    const std::string& ca_file);

// `st` with every occurrence of `secret` replaced by `placeholder`
// ("<BOAT_API_KEY>"), its payloads kept: a server that echoes a key back
// must not put it in our message.
absl::Status ScrubSecret(const absl::Status& st, std::string_view secret, std::string_view placeholder);

}  // namespace tether::native
