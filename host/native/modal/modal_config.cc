#include "host/native/modal/modal_config.h"

#include <cctype>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tether::modal {

namespace {

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }
std::string_view S(absl::string_view s) { return {s.data(), s.size()}; }

absl::Status Bad(std::size_t line, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("~/.modal.toml line ", line, ": ", A(why)));
}

bool BareKeyChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

// A TOML string ("..." with \\ \" \n \t escapes, or '...' literal) at the
// start of `v`; the rest of the line after it must be blank or a comment.
absl::StatusOr<std::string> TomlString(std::string_view v, std::size_t line) {
  const char q = v[0];
  std::string out;
  std::size_t i = 1;
  for (; i < v.size() && v[i] != q; ++i) {
    char c = v[i];
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return Bad(line, "a control character in a string");
    if (q == '"' && c == '\\') {
      if (++i >= v.size()) break;
      switch (v[i]) {
        case '\\': c = '\\'; break;
        case '"': c = '"'; break;
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        default: return Bad(line, "an unsupported escape in a string");
      }
    }
    out.push_back(c);
  }
  if (i >= v.size()) return Bad(line, "an unterminated string");
  std::string_view rest = S(absl::StripAsciiWhitespace(A(v.substr(i + 1))));
  if (!rest.empty() && rest[0] != '#') return Bad(line, "text after a value");
  return out;
}

}  // namespace

absl::StatusOr<ModalProfile> ParseModalToml(std::string_view text, std::string_view profile) {
  if (text.size() > kMaxTomlBytes) return absl::InvalidArgumentError("~/.modal.toml is larger than 1 MiB");
  struct Section {
    std::string name;
    ModalProfile p;
    bool active = false;
  };
  std::vector<Section> sections;
  std::size_t line_no = 0;
  for (absl::string_view raw : absl::StrSplit(A(text), '\n')) {
    ++line_no;
    std::string_view line = S(absl::StripAsciiWhitespace(raw));
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      const std::size_t close = line.find(']');
      if (close == std::string_view::npos) return Bad(line_no, "an unterminated [section]");
      std::string_view name = line.substr(1, close - 1);
      if (name.size() >= 2 && (name.front() == '"' || name.front() == '\'') && name.back() == name.front()) {
        name = name.substr(1, name.size() - 2);
      }
      std::string_view rest = S(absl::StripAsciiWhitespace(A(line.substr(close + 1))));
      if (name.empty() || (!rest.empty() && rest[0] != '#')) return Bad(line_no, "a malformed [section]");
      sections.push_back(Section{std::string(name), {}, false});
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return Bad(line_no, "expected key = value");
    std::string_view key = S(absl::StripAsciiWhitespace(A(line.substr(0, eq))));
    std::string_view value = S(absl::StripAsciiWhitespace(A(line.substr(eq + 1))));
    if (key.empty() || value.empty()) return Bad(line_no, "expected key = value");
    for (char c : key) {
      if (!BareKeyChar(c)) return Bad(line_no, "an unsupported key");
    }
    if (sections.empty()) continue;  // top-level keys: not a profile's
    Section& s = sections.back();
    if (value[0] == '"' || value[0] == '\'') {
      absl::StatusOr<std::string> str = TomlString(value, line_no);
      if (!str.ok()) return str.status();
      if (key == "token_id") s.p.token_id = *std::move(str);
      if (key == "token_secret") s.p.token_secret = *std::move(str);
      if (key == "server_url") s.p.server_url = *std::move(str);
    } else if (key == "active") {
      std::string_view word = value.substr(0, value.find('#'));
      word = S(absl::StripAsciiWhitespace(A(word)));
      if (word == "true") {
        s.active = true;
      } else if (word != "false") {
        return Bad(line_no, "active must be true or false");
      }
    }
    // Other values (numbers, arrays) belong to settings tether does not use.
  }
  for (const Section& s : sections) {
    if (profile.empty() ? s.active : s.name == profile) return s.p;
  }
  if (!profile.empty()) {
    return absl::NotFoundError(absl::StrCat("no profile [", A(profile), "] in ~/.modal.toml"));
  }
  return ModalProfile{};
}

std::optional<std::int64_t> JwtExpiry(std::string_view jwt) {
  if (jwt.size() > kMaxJwtBytes) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(A(jwt), '.');
  if (parts.size() != 3) return std::nullopt;
  std::string json;
  if (!absl::WebSafeBase64Unescape(parts[1], &json)) return std::nullopt;
  // A flat scan for "exp": a number, enough for a JWT's claims object.
  std::size_t at = 0;
  while ((at = json.find("\"exp\"", at)) != std::string::npos) {
    std::size_t i = at + 5;
    while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r')) ++i;
    if (i < json.size() && json[i] == ':') {
      ++i;
      while (i < json.size() && (json[i] == ' ' || json[i] == '\t')) ++i;
      std::size_t end = i;
      while (end < json.size() && (std::isdigit(static_cast<unsigned char>(json[end])) || json[end] == '.')) ++end;
      double v = 0;
      if (end > i && absl::SimpleAtod(A(std::string_view(json).substr(i, end - i)), &v) && v >= 0 &&
          v < 1e15) {
        return static_cast<std::int64_t>(v);
      }
      return std::nullopt;
    }
    at += 5;
  }
  return std::nullopt;
}

bool IsV1SandboxId(std::string_view id) {
  if (id.size() != 25 || id.substr(0, 3) != "sb-") return false;
  for (char c : id.substr(3)) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace tether::modal
