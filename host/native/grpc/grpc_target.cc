#include "host/native/grpc/grpc_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tether::rpc {

namespace {

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) { return absl::EqualsIgnoreCase(A(a), A(b)); }

}  // namespace

std::string GrpcTarget::target() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<GrpcTarget> ParseGrpcUrl(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("the URL '", A(url.substr(0, 200)), "' ", A(why)));
  };
  GrpcTarget t;
  std::string_view rest;
  if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else if (url.substr(0, 7) == "http://") {
    t.tls = false;
    t.port = 80;
    rest = url.substr(7);
  } else {
    return bad("is not http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return bad("has no host");
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) return bad("has a path, a query or credentials");
  std::string_view host = rest, port;
  if (rest[0] == '[') {
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("has an unterminated [address]");
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("has text after the address");
      port = after.substr(1);
    }
  } else if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("has an IPv6 address without brackets");
  }
  if (host.empty()) return bad("has no host");
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '_') {
      return bad("has a host with characters a host name cannot have");
    }
  }
  if (!port.empty() || (rest.back() == ':')) {
    std::uint32_t p = 0;
    if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(A(port), &p) || p == 0 || p > 65535) {
      return bad("has a bad port");
    }
    t.port = static_cast<std::uint16_t>(p);
  }
  t.host = std::string(host);
  t.loopback = IsLoopbackHost(t.host);
  return t;
}

// As host/net's IsLoopbackHost (host/net/url.cc), which this target cannot
// link: a name is loopback only as "localhost"; "127.x.example" is a name
// anyone can register, so an address must parse as one.
bool IsLoopbackHost(std::string_view host) {
  if (EqualsIgnoreCase(host, "localhost") || EqualsIgnoreCase(host, "localhost.")) return true;
  const std::string h(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

absl::Status CheckCleartext(const GrpcTarget& t, std::string_view who, std::string_view what) {
  if (t.tls || t.loopback) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      A(who), ": plain http:// to ", A(t.host), " (", A(what), ") is refused: the token would travel unencrypted; "
      "only loopback hosts (127.0.0.0/8, ::1, localhost) may go unencrypted. Use https://, or reach the server "
      "through a loopback address (e.g. an SSH tunnel: ssh -L 8080:HOST:PORT, then http://127.0.0.1:8080)"));
}

}  // namespace tether::rpc
