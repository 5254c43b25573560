// Fuzz target: ParseReference over hostile JSON (a reference is user input:
// `tether status @FILE` reads whatever the file holds).
//
// Input: the text itself, parsed at a fixed "now". It must never crash or
// allocate without bound; whatever parses must satisfy every rule the parser
// promises (paths absolute and plain, secret 16..64 bytes, ticket 32 bytes,
// window 0 or 16 KiB..64 MiB, not expired, pty implies stdin), and must
// survive an encode/parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/process/reference.h"

namespace {

using tether::ProcessReference;
using tether::fuzz::Fail;

constexpr std::int64_t kNow = 1900000000;  // a fixed clock: the input decides expiry

bool Same(const ProcessReference& a, const ProcessReference& b) {
  return a.provider == b.provider && a.sandbox == b.sandbox && a.supervisor == b.supervisor &&
         a.state_dir == b.state_dir && a.secret == b.secret && a.pid == b.pid && a.stdin_pipe == b.stdin_pipe &&
         a.pty == b.pty && a.text == b.text && a.backpressure == b.backpressure && a.window_bytes == b.window_bytes &&
         a.output_left == b.output_left && a.stdout_offset == b.stdout_offset &&
         a.stderr_offset == b.stderr_offset && a.expires_at == b.expires_at && a.ticket_mac == b.ticket_mac;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ProcessReference> r = tether::ParseReference(text, kNow);
  if (!r.ok()) {
    if (r.status().message().empty()) Fail("reference", "an error without a message");
    return 0;
  }
  if (size > tether::kMaxReferenceBytes) Fail("reference", "accepted more than the size limit");
  if (r->state_dir.empty() || r->state_dir[0] != '/' || r->supervisor.empty() || r->supervisor[0] != '/') {
    Fail("reference", "accepted a relative path");
  }
  for (const std::string* p : {&r->state_dir, &r->supervisor, &r->provider, &r->sandbox}) {
    if (p->find('\0') != std::string::npos) Fail("reference", "accepted a NUL");
  }
  if (r->state_dir.find("/../") != std::string::npos || r->supervisor.find("/../") != std::string::npos) {
    Fail("reference", "accepted '..'");
  }
  if (r->secret.size() < 16 || r->secret.size() > 64) Fail("reference", "accepted a secret of a bad size");
  if (r->ticket_mac.size() != 32) Fail("reference", "accepted a ticket of a bad size");
  if (r->window_bytes != 0 && (r->window_bytes < 16 * 1024 || r->window_bytes > (64u << 20))) {
    Fail("reference", "accepted a window out of range");
  }
  if (r->expires_at <= kNow) Fail("reference", "accepted an expired reference");
  if (r->pty && !r->stdin_pipe) Fail("reference", "accepted a pty without stdin");
  const std::string again = tether::EncodeReference(*r);
  absl::StatusOr<ProcessReference> r2 = tether::ParseReference(again, kNow);
  if (!r2.ok()) Fail("reference", "its own encoding does not parse");
  if (!Same(*r, *r2)) Fail("reference", "the round trip changed a field");
  if (tether::EncodeReference(*r2) != again) Fail("reference", "encoding is not stable");
  return 0;
}
