#include "host/native/native_options.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tether::native {
namespace {

constexpr std::size_t kMaxIdBytes = 128;  // a sandbox or devbox id

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool HeaderSafe(std::string_view value) {
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) return false;
  }
  return true;
}

absl::Status CheckId(std::string_view who, std::string_view noun, std::string_view usage, std::string_view id,
                     std::string_view extra) {
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(A(who), ": a ", A(noun), " is required (", A(usage), ")"));
  }
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(A(who), ": the ", A(noun), " is too long (", kMaxIdBytes, " at most)"));
  }
  if (!PlainId(id, extra)) {
    std::string also;
    for (char c : extra) absl::StrAppend(&also, "'", absl::string_view(&c, 1), "', ");
    return absl::InvalidArgumentError(
        absl::StrCat(A(who), ": a ", A(noun), " is letters, digits, ", also, "'-' and '_'"));
  }
  return absl::OkStatus();
}

absl::Status ApiKeyOrEnv(std::string_view who, const char* env, std::string& key) {
  if (key.empty()) key = Env(env);
  if (key.empty()) return absl::UnauthenticatedError(absl::StrCat(A(who), ": set ", env, " to your API key"));
  if (!HeaderSafe(key)) {
    return absl::InvalidArgumentError(absl::StrCat(A(who), ": ", env, " contains a space or a control character"));
  }
  return absl::OkStatus();
}

bool PlainId(std::string_view id, std::string_view extra) {
  if (id.empty() || id.size() > kMaxIdBytes) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<net::Url> ParseApiUrl(std::string_view who, std::string_view text) {
  const std::string w(who);  // (Debian's absl has a string_view of its own)
  absl::StatusOr<net::Url> url = net::ParseUrl(text);
  if (!url.ok()) return absl::InvalidArgumentError(absl::StrCat(w, ": the API URL: ", url.status().message()));
  if (url->scheme != "https" && url->scheme != "http") {
    return absl::InvalidArgumentError(absl::StrCat(
        w, ": the API URL must be https:// (or http:// to a loopback address), not ", url->scheme, "://"));
  }
  return url;
}

absl::StatusOr<net::ClientOptions> ApiClientOptions(std::string_view who, std::string_view url,
                                                    const std::string& ca_file) {
  absl::StatusOr<net::Url> u = ParseApiUrl(who, url);
  if (!u.ok()) return u.status();
  net::ClientOptions co;
  co.url = *std::move(u);
  co.tls.ca_file = ca_file;
  return co;
}

absl::Status ScrubSecret(const absl::Status& st, std::string_view secret, std::string_view placeholder) {
  if (secret.empty() || !absl::StrContains(st.message(), A(secret))) return st;
  absl::Status out(st.code(), absl::StrReplaceAll(st.message(), {{A(secret), A(placeholder)}}));
  st.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace tether::native
