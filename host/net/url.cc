// Endpoints, encoding and HTTP errors (http.h): everything of tether::net
// that does no I/O.
#include <boost/asio/ip/address.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cctype>
#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "host/net/http.h"

namespace tether::net {
namespace {

// A server's message quoted in an error: this many bytes at most.
constexpr std::size_t kMaxServerMessageBytes = 200;

absl::Status BadUrl(const std::string& why) { return absl::InvalidArgumentError(absl::StrCat("bad URL: ", why)); }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) { return a.size() == b.size() && Lower(a) == Lower(b); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsHostChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_'; }

bool IsPathChar(char c) {
  return c > 0x20 && c < 0x7f && c != '?' && c != '#' && c != '"' && c != '<' && c != '>' && c != '\\' &&
         c != '^' && c != '`' && c != '{' && c != '|' && c != '}';
}

std::string Escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string ServerMessage(std::string_view body) {
  std::string_view trimmed = Trim(body);
  if (trimmed.starts_with("{")) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(trimmed, ec);
    if (!ec && v.is_object()) {
      for (const char* key : {"message", "error", "detail"}) {
        if (const boost::json::value* m = v.as_object().if_contains(key); m && m->is_string()) {
          std::string_view text = m->as_string();
          return Escape(text.substr(0, kMaxServerMessageBytes));
        }
      }
    }
  }
  return Escape(trimmed.substr(0, kMaxServerMessageBytes));
}

}  // namespace

bool IsLoopbackHost(std::string_view host) {
  if (EqualsIgnoreCase(host, "localhost") || EqualsIgnoreCase(host, "localhost.")) return true;
  boost::system::error_code ec;
  boost::asio::ip::address a = boost::asio::ip::make_address(std::string(host), ec);
  if (ec) return false;
  if (a.is_v4()) return a.to_v4().is_loopback();
  boost::asio::ip::address_v6 v6 = a.to_v6();
  if (v6.is_v4_mapped()) return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6).is_loopback();
  return v6.is_loopback();
}

absl::StatusOr<Url> ParseUrl(std::string_view text) {
  std::size_t sep = text.find("://");
  if (sep == std::string_view::npos) return BadUrl("no scheme (expected https://host, unix:///path, ...)");
  Url url;
  url.scheme = Lower(text.substr(0, sep));
  std::string_view rest = text.substr(sep + 3);
  for (char c : rest) {
    if (c == '?' || c == '#') return BadUrl("a query or fragment is not allowed in an endpoint");
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return BadUrl("a space or control character");
  }
  if (url.scheme == "unix") {
    if (rest.empty() || rest[0] != '/') return BadUrl("unix:// needs an absolute socket path (unix:///path)");
    url.host = "localhost";
    url.unix_path = std::string(rest);
    return url;
  }
  bool tcp = url.scheme == "tcp";
  if (tcp) url.scheme = "http";
  if (url.scheme != "https" && url.scheme != "http" && url.scheme != "wss" && url.scheme != "ws") {
    return BadUrl(absl::StrCat("unknown scheme ", Escape(url.scheme), " (https, http, wss, ws, unix, tcp)"));
  }
  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return BadUrl("user information is not allowed in an endpoint");
  std::string_view host;
  std::string_view port;
  if (authority.starts_with("[")) {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return BadUrl("an unclosed [ in the host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return BadUrl("junk after the [IPv6] host");
      port = after.substr(1);
      if (port.empty()) return BadUrl("an empty port");
    }
    boost::system::error_code ec;
    if (boost::asio::ip::make_address_v6(std::string(host), ec), ec) return BadUrl("a bad IPv6 address");
  } else {
    std::size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return BadUrl("an empty port");
    }
    for (char c : host) {
      if (!IsHostChar(c)) return BadUrl("a bad character in the host");
    }
  }
  if (host.empty()) return BadUrl("no host");
  if (!port.empty()) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return BadUrl("a bad port (1-65535)");
    }
    url.port = std::string(port);
  } else {
    url.port = tcp ? "2375" : url.tls() ? "443" : "80";
  }
  url.host = Lower(host);
  if (!url.tls() && !IsLoopbackHost(url.host)) {
    return BadUrl(absl::StrCat("plain ", url.scheme, ":// to ", url.host,
                               " is refused: only loopback hosts may go unencrypted (use https:// or wss://)"));
  }
  for (char c : path) {
    if (!IsPathChar(c)) return BadUrl("a bad character in the path");
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.base_path = std::string(path);
  return url;
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string_view Response::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return {};
}

namespace {
constexpr char kUntrustedServerPayload[] = "tether/net/untrusted-server";
}  // namespace

absl::Status UntrustedServerError(std::string_view message) {
  absl::Status st = absl::PermissionDeniedError(absl::StrCat(std::string(message),
                                                  " (not retried: check the CA the server's certificate comes from, "
                                                  "the host name it is reached by, and this machine's clock)"));
  st.SetPayload(kUntrustedServerPayload, absl::Cord("1"));
  return st;
}

bool IsUntrustedServer(const absl::Status& st) {
  return absl::IsPermissionDenied(st) && st.GetPayload(kUntrustedServerPayload).has_value();
}

absl::Status HttpError(const Response& r, std::string_view what) {
  std::string message = absl::StrCat(std::string(what), ": HTTP ", r.status);
  std::string server = ServerMessage(r.body);
  if (!server.empty()) absl::StrAppend(&message, ": ", server);
  switch (r.status) {
    case 400:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return absl::FailedPreconditionError(message);
    case 408:
    case 429:
    case 502:
    case 503:
    case 504:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tether::net
