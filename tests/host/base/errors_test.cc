#include "tether/errors.h"

#include <doctest.h>

#include <random>
#include <string>

#include "host/tunnel/session.h"
#include "host/base/wire_errors.h"

namespace tether {
namespace {

TEST_CASE("a failed precondition that is not input-closed has no public INPUT_CLOSED") {
  // Before: every kFailedPrecondition was INPUT_CLOSED (a missing
  // supervisor binary, a refused private directory, ...).
  CHECK(ErrorCodeOf(absl::FailedPreconditionError("cannot read /x/tether-supervisor-x86_64")) ==
        ErrorCode::kInternal);
  CHECK(ErrorCodeOf(absl::FailedPreconditionError("input closed: looks like it, but nobody said so")) ==
        ErrorCode::kInternal);
  CHECK(ErrorCodeOf(InputClosedError("stdin was already closed")) == ErrorCode::kInputClosed);
  CHECK(InputClosedError("stdin was already closed").message() == "input closed: stdin was already closed");
  CHECK(absl::IsFailedPrecondition(InputClosedError("x")));
}

TEST_CASE("an unknown error is OUTCOME_UNKNOWN only when made as one") {
  CHECK(ErrorCodeOf(absl::UnknownError("OUTCOME_UNKNOWN: the text alone proves nothing")) == ErrorCode::kInternal);
  const absl::Status st = OutcomeUnknownError("setup did not finish");
  CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
  CHECK(absl::IsUnknown(st));
  CHECK(st.message() == "OUTCOME_UNKNOWN: setup did not finish");
}

TEST_CASE("BUSY is the attached code, never the word in a message") {
  CHECK(ErrorCodeOf(BusyError("another attachment holds the process")) == ErrorCode::kBusy);
  CHECK(ErrorCodeOf(absl::UnavailableError("supervisor: BUSY")) == ErrorCode::kUnavailable);
  CHECK(absl::IsUnavailable(BusyError("held")));  // what the CLI's exit status rests on
}

TEST_CASE("every public code survives MakeError with its canonical code and name") {
  for (int i = static_cast<int>(ErrorCode::kInvalidArgument); i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    const auto code = static_cast<ErrorCode>(i);
    const absl::Status st = MakeError(code, "m");
    CAPTURE(ErrorCodeName(code));
    CHECK(!st.ok());
    CHECK(st.code() == CanonicalCodeOf(code));
    CHECK(ErrorCodeOf(st) == code);
  }
  CHECK(MakeError(ErrorCode::kOk, "m").ok());
  CHECK(ErrorCodeOf(absl::OkStatus()) == ErrorCode::kOk);
}

TEST_CASE("the named helpers keep their codes and messages") {
  CHECK(ErrorCodeOf(WaitAbortedError("w")) == ErrorCode::kWaitAborted);
  CHECK(WaitAbortedError("w").message() == "WAIT_ABORTED: w");
  CHECK(absl::IsCancelled(WaitAbortedError("w")));
  CHECK(ErrorCodeOf(OutputCapacityError("o")) == ErrorCode::kOutputCapacity);
  CHECK(absl::IsResourceExhausted(OutputCapacityError("o")));
  CHECK(MakeError(ErrorCode::kInputClosed, "this handle was disconnected").message() ==
        "this handle was disconnected");
}

TEST_CASE("canonical codes with one meaning still map without an attachment") {
  CHECK(ErrorCodeOf(absl::NotFoundError("x")) == ErrorCode::kNotFound);
  CHECK(ErrorCodeOf(absl::PermissionDeniedError("x")) == ErrorCode::kPermissionDenied);
  CHECK(ErrorCodeOf(absl::InvalidArgumentError("x")) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeOf(absl::UnimplementedError("x")) == ErrorCode::kUnsupported);
  CHECK(ErrorCodeOf(absl::DataLossError("x")) == ErrorCode::kProtocol);
  CHECK(ErrorCodeOf(absl::DeadlineExceededError("x")) == ErrorCode::kExpired);
}

TEST_CASE("every wire error code maps to one public code, and back") {
  const wire::ErrorCode all[] = {
      wire::ERROR_PROTOCOL,     wire::ERROR_STALE_GENERATION, wire::ERROR_BUSY,
      wire::ERROR_UNAUTHENTICATED, wire::ERROR_INVALID_ARGUMENT, wire::ERROR_INPUT_CLOSED,
      wire::ERROR_RESOURCE_EXHAUSTED, wire::ERROR_NOT_FOUND,  wire::ERROR_LAUNCH_FAILED,
      wire::ERROR_CANCELLED,    wire::ERROR_UNSUPPORTED,      wire::ERROR_INTERNAL,
      wire::ERROR_EXPIRED};
  for (wire::ErrorCode w : all) {
    CAPTURE(static_cast<int>(w));
    const absl::Status st = StatusFromWire(w, "supervisor: m");
    CHECK(ErrorCodeOf(st) == ErrorCodeFromWire(w));
    CHECK(ErrorCodeFromWire(WireCodeOf(ErrorCodeOf(st))) == ErrorCodeOf(st));
  }
  CHECK(ErrorCodeOf(StatusFromWire(wire::ERROR_INPUT_CLOSED, "m")) == ErrorCode::kInputClosed);
  CHECK(ErrorCodeOf(StatusFromWire(wire::ERROR_BUSY, "m")) == ErrorCode::kBusy);
  CHECK(absl::IsUnavailable(StatusFromWire(wire::ERROR_BUSY, "m")));
  CHECK(absl::IsNotFound(StatusFromWire(wire::ERROR_LAUNCH_FAILED, "m")));
  CHECK(absl::IsUnauthenticated(StatusFromWire(wire::ERROR_UNAUTHENTICATED, "m")));
  CHECK(absl::IsAborted(StatusFromWire(wire::ERROR_STALE_GENERATION, "m")));
  CHECK(ErrorCodeOf(StatusFromWire(static_cast<wire::ErrorCode>(999), "m")) == ErrorCode::kInternal);
  CHECK(WireCodeOf(ErrorCode::kBusy) == wire::ERROR_BUSY);
  CHECK(WireCodeOf(ErrorCode::kInputClosed) == wire::ERROR_INPUT_CLOSED);
}

TEST_CASE("every value of the schema's ErrorCode has its row in the host's table") {
  // The list above is written by hand; this one is the schema's own, so a
  // code added to tether.proto without a row in host/base/wire_errors.cc fails
  // here instead of reaching users as INTERNAL.
  // (The schema is built for the lite runtime: its range, not a descriptor.)
  int values = 0;
  for (int n = wire::ErrorCode_MIN; n <= wire::ErrorCode_MAX; ++n) {
    if (!wire::ErrorCode_IsValid(n)) continue;
    ++values;
    const auto w = static_cast<wire::ErrorCode>(n);
    CAPTURE(wire::ErrorCode_Name(w));
    if (w == wire::ERROR_UNSPECIFIED) continue;
    const bool internal_by_design = w == wire::ERROR_INTERNAL || w == wire::ERROR_UNAUTHENTICATED;
    CHECK((ErrorCodeFromWire(w) == ErrorCode::kInternal) == internal_by_design);
    // (A code without a row is made as kInternal with canonical kInternal.)
    CHECK((StatusFromWire(w, "m").code() == absl::StatusCode::kInternal) == (w == wire::ERROR_INTERNAL));
  }
  CHECK(values >= 14);
}

TEST_CASE("StatusFromWireError goes through the one mapping") {
  wire::Error e;
  e.set_code(wire::ERROR_INPUT_CLOSED);
  e.set_message("stdin after EOF");
  const absl::Status st = StatusFromWireError(e);
  CHECK(ErrorCodeOf(st) == ErrorCode::kInputClosed);
  CHECK(st.message() == "supervisor: stdin after EOF");
}

TEST_CASE("a supervisor's error text is printable: no escape sequence from inside the sandbox") {
  wire::Error e;
  e.set_code(wire::ERROR_INPUT_CLOSED);
  e.set_message("\x1b]0;owned\x07\x1b[2J");
  CHECK(StatusFromWireError(e).message() == "supervisor: \\x1b]0;owned\\x07\\x1b[2J");
}

// True when `s` holds nothing a terminal acts on: printable ASCII, and
// valid UTF-8 of letters (no C1 control, no bidirectional format).
bool Inert(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  for (std::string_view bad : {"\xc2\x80", "\xc2\x9b", "\xc2\x9d", "\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x80\x8b",
                               "\xef\xbb\xbf", "\xe2\x80\xa8"}) {
    if (s.find(bad) != std::string_view::npos) return false;
  }
  return true;
}

TEST_CASE("PrintableMessage escapes every control byte and keeps text") {
  CHECK(PrintableMessage("sandbox not found") == "sandbox not found");
  CHECK(PrintableMessage("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82") ==
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82");  // letters and emoji stay
  CHECK(PrintableMessage("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(PrintableMessage("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(PrintableMessage(std::string("nul\0here", 8)) == "nul\\x00here");
  CHECK(PrintableMessage("\x7f") == "\\x7f");
  // C1 controls as UTF-8 (U+009B is CSI on many terminals), bidi overrides
  // and zero-width characters (text that reads differently from what it is).
  CHECK(PrintableMessage("\xc2\x9b" "2J") == "\\u{009b}2J");
  CHECK(PrintableMessage("evil\xe2\x80\xae" "txt.exe") == "evil\\u{202e}txt.exe");
  CHECK(PrintableMessage("a\xe2\x80\x8b" "b\xef\xbb\xbf") == "a\\u{200b}b\\u{feff}");
  // Invalid UTF-8: a lone continuation, an overlong '/', a surrogate, a cut
  // sequence, past U+10FFFF: each byte as \xNN.
  CHECK(PrintableMessage("\x80") == "\\x80");
  CHECK(PrintableMessage("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(PrintableMessage("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(PrintableMessage("\xe6\x97") == "\\xe6\\x97");
  CHECK(PrintableMessage("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  // Printing is idempotent: an escaped message passes through unchanged.
  const std::string once = PrintableMessage("\x1b]8;;http://x\x07link\xc2\x9b");
  CHECK(PrintableMessage(once) == once);
}

TEST_CASE("PrintableMessage of every byte value and of random bytes is inert") {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  const std::string printed = PrintableMessage(all, 1 << 20);
  CHECK(Inert(printed));
  CHECK(printed.find("\\x1b") != std::string::npos);
  CHECK(printed.find("ABC") != std::string::npos);
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? 0x80 | rng() % 64 : rng() % 256);
    const std::string p = PrintableMessage(bytes, 40);
    CHECK(Inert(p));
    CHECK(p.size() <= 40);
  }
}

TEST_CASE("PrintableMessage bounds its output, cut on a character boundary") {
  CHECK(PrintableMessage(std::string(5000, 'x')).size() == kMaxPrintableMessage);
  CHECK(PrintableMessage(std::string(5000, 'x')).ends_with("..."));
  CHECK(PrintableMessage("abcdef", 6) == "abcdef");
  CHECK(PrintableMessage("abcdefg", 6) == "abc...");
  // Never half an escape or half a character before the mark.
  CHECK(PrintableMessage("ab\x1b" "cdefgh", 8) == "ab...");
  CHECK(PrintableMessage("\xe6\x97\xa5\xe6\x9c\xac\xe6\x97\xa5", 8) == "\xe6\x97\xa5...");
  CHECK(PrintableMessage("abc", 2).size() <= 2);
  // An enormous message costs work in proportion to the bound only.
  const std::string huge(64 << 20, '\x1b');
  CHECK(PrintableMessage(huge).size() <= kMaxPrintableMessage);
  CHECK(PrintableMessage(huge).size() > kMaxPrintableMessage - 8);
}

}  // namespace
}  // namespace tether
