#include "tether/errors.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "host/base/wire_errors.h"

namespace tether {
namespace {

constexpr char kPayloadUrl[] = "type.tether.dev/ErrorCode";

struct CodeInfo {
  ErrorCode code;
  std::string_view name;
  absl::StatusCode canonical;
};

constexpr CodeInfo kCodes[] = {
    {ErrorCode::kOk, "OK", absl::StatusCode::kOk},
    {ErrorCode::kInvalidArgument, "INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
    {ErrorCode::kUnsupported, "UNSUPPORTED", absl::StatusCode::kUnimplemented},
    {ErrorCode::kUnavailable, "UNAVAILABLE", absl::StatusCode::kUnavailable},
    {ErrorCode::kBusy, "BUSY", absl::StatusCode::kUnavailable},
    {ErrorCode::kExpired, "EXPIRED", absl::StatusCode::kDeadlineExceeded},
    {ErrorCode::kInputClosed, "INPUT_CLOSED", absl::StatusCode::kFailedPrecondition},
    {ErrorCode::kOutcomeUnknown, "OUTCOME_UNKNOWN", absl::StatusCode::kUnknown},
    {ErrorCode::kNotFound, "NOT_FOUND", absl::StatusCode::kNotFound},
    {ErrorCode::kPermissionDenied, "PERMISSION_DENIED", absl::StatusCode::kPermissionDenied},
    {ErrorCode::kProtocol, "PROTOCOL", absl::StatusCode::kDataLoss},
    {ErrorCode::kCancelled, "CANCELLED", absl::StatusCode::kCancelled},
    {ErrorCode::kOutputCapacity, "OUTPUT_CAPACITY", absl::StatusCode::kResourceExhausted},
    {ErrorCode::kWaitAborted, "WAIT_ABORTED", absl::StatusCode::kCancelled},
    {ErrorCode::kResourceExhausted, "RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
    {ErrorCode::kInternal, "INTERNAL", absl::StatusCode::kInternal},
};

const CodeInfo& InfoOf(ErrorCode code) {
  for (const CodeInfo& i : kCodes) {
    if (i.code == code) return i;
  }
  return kCodes[sizeof kCodes / sizeof kCodes[0] - 1];  // INTERNAL
}

// A status made without an attached code: only canonical codes with one
// public meaning map; kFailedPrecondition ("input closed"? "not a private
// directory"?) and kUnknown ("outcome unknown"? anything) do not.
ErrorCode FromCanonical(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return ErrorCode::kOk;
    case absl::StatusCode::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case absl::StatusCode::kUnimplemented: return ErrorCode::kUnsupported;
    case absl::StatusCode::kUnavailable: return ErrorCode::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded: return ErrorCode::kExpired;
    case absl::StatusCode::kNotFound: return ErrorCode::kNotFound;
    case absl::StatusCode::kPermissionDenied: return ErrorCode::kPermissionDenied;
    case absl::StatusCode::kResourceExhausted: return ErrorCode::kResourceExhausted;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted: return ErrorCode::kProtocol;
    case absl::StatusCode::kCancelled: return ErrorCode::kCancelled;
    default: return ErrorCode::kInternal;
  }
}

absl::Status Prefixed(ErrorCode code, std::string_view message) {
  return MakeError(code, absl::StrCat(std::string(InfoOf(code).name), ": ", std::string(message)));
}

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) { return InfoOf(code).name; }

absl::StatusCode CanonicalCodeOf(ErrorCode code) { return InfoOf(code).canonical; }

absl::Status WithErrorCode(absl::Status status, ErrorCode code) {
  if (status.ok()) return status;  // (absl ignores payloads on OK anyway)
  status.SetPayload(kPayloadUrl, absl::Cord(std::string(ErrorCodeName(code))));
  return status;
}

absl::Status MakeError(ErrorCode code, std::string_view message) {
  if (code == ErrorCode::kOk) return absl::OkStatus();
  return WithErrorCode(absl::Status(CanonicalCodeOf(code), std::string(message)), code);
}

absl::Status OutcomeUnknownError(std::string_view message) { return Prefixed(ErrorCode::kOutcomeUnknown, message); }
absl::Status OutputCapacityError(std::string_view message) { return Prefixed(ErrorCode::kOutputCapacity, message); }
absl::Status WaitAbortedError(std::string_view message) { return Prefixed(ErrorCode::kWaitAborted, message); }
absl::Status InputClosedError(std::string_view message) {
  return MakeError(ErrorCode::kInputClosed, absl::StrCat("input closed: ", std::string(message)));
}
absl::Status BusyError(std::string_view message) { return MakeError(ErrorCode::kBusy, message); }

namespace {

// The code point of the valid UTF-8 sequence at the start of `s` (never
// empty) and its length, or length 0 for an invalid one (overlong, a
// surrogate, past U+10FFFF, cut short).
std::pair<char32_t, std::size_t> DecodeUtf8(absl::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t n;
  char32_t cp;
  if (c < 0x80) return {c, 1};
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, cp = c & 0x07;
  } else {
    return {0, 0};
  }
  if (s.size() < n) return {0, 0};
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return {0, 0};
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
    return {0, 0};
  }
  return {cp, n};
}

// Characters that move, hide or reorder text on a terminal: C1 controls,
// line and paragraph separators, zero-width and bidirectional formatting.
bool IsHiddenFormat(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::string PrintableMessage(absl::string_view message, std::size_t max_bytes) {
  static constexpr std::string_view kCut = "...";
  std::string out;
  std::size_t keep = 0;  // the longest prefix of `out` that leaves room for kCut
  while (!message.empty()) {
    const std::size_t before = out.size();
    if (before + kCut.size() <= max_bytes) keep = before;
    auto [cp, n] = DecodeUtf8(message);
    if (n == 0) {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<unsigned char>(message[0]), absl::kZeroPad2));
      n = 1;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<std::uint32_t>(cp), absl::kZeroPad2));
    } else if (IsHiddenFormat(cp)) {
      absl::StrAppend(&out, "\\u{", absl::Hex(static_cast<std::uint32_t>(cp), absl::kZeroPad4), "}");
    } else {
      out.append(message.data(), n);
    }
    message.remove_prefix(n);
    if (out.size() > max_bytes) break;  // (bounded work for any input)
  }
  if (out.size() <= max_bytes && message.empty()) return out;
  if (out.size() + kCut.size() <= max_bytes) keep = out.size();
  out.resize(keep);
  if (kCut.size() <= max_bytes) out += kCut;
  return out;
}

absl::Status StatusFromWireError(const wire::Error& e) {
  return StatusFromWire(e.code(), absl::StrCat("supervisor: ", PrintableMessage(e.message())));
}

ErrorCode ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return ErrorCode::kOk;
  if (auto p = status.GetPayload(kPayloadUrl)) {  // absl::optional (Debian's is not std::)
    const std::string name(*p);
    for (const CodeInfo& i : kCodes) {
      if (i.name == name) return i.code;
    }
  }
  return FromCanonical(status.code());
}

}  // namespace tether
