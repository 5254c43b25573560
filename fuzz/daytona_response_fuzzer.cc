// Fuzz target: what the daytona provider reads from the network
// (host/native/daytona/daytona_api.h): the API's and toolbox's JSON answers
// and the follow-logs stream.
//
// Input: one selector byte, then the body.
//   0 ParseSandbox, 1 ParseProxyUrl, 2 ParseExecAnswer, 3 ParseCommandAnswer:
//     never crash, an error has a message and a code from the parser's list,
//     an accepted answer keeps the promises (cmdId safe in a path: no
//     '/', not '.' or '..', exit
//     code 0..255, fields no larger than the body).
//   4 LogDemuxer: the stream fed whole and fed in chunk sizes taken from
//     its first bytes gives the same stdout and stderr, no more bytes than
//     went in, and counts every byte consumed.
//   5 v2::ParseProcess, 6 v2::ParseProcessList, 7 v2::ParseLogFrame,
//   8 v2::ParseEofCursor, 9 v2::ErrorCodeOf (daytona_v2.h): the same error
//     rules; an accepted record has an id safe in a path and an exit code
//     in 0..255; a frame a printable cursor of 1..256 bytes and no more
//     bytes than its base64 holds; an error code at most 64 bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/native/daytona/daytona_api.h"
#include "host/native/daytona/daytona_v2.h"

namespace {

using tether::fuzz::Fail;
namespace daytona = tether::daytona;
constexpr const char* kName = "daytona_response";

void CheckError(const absl::Status& st) {
  if (st.message().empty()) Fail(kName, "an error without a message");
  const absl::StatusCode c = st.code();
  if (c != absl::StatusCode::kDataLoss && c != absl::StatusCode::kResourceExhausted) {
    Fail(kName, "an error that is neither kDataLoss nor kResourceExhausted");
  }
}

bool PathSafe(const std::string& id) {
  if (id.empty() || id.size() > 256 || id.find_first_not_of('.') == std::string::npos) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

void CheckProcess(const daytona::v2::ProcessView& p) {
  if (!PathSafe(p.id)) Fail(kName, "a v2 process id unsafe in a path");
  if (p.exit_code && (*p.exit_code < 0 || *p.exit_code > 255)) Fail(kName, "a v2 exit code out of range");
  const std::optional<int> st = daytona::v2::ExitStatusOf(p);
  if (st && (*st < 0 || *st > 255)) Fail(kName, "a v2 exit status out of range");
}

void V2(int which, std::string_view body) {
  namespace v2 = daytona::v2;
  switch (which) {
    case 5: {
      absl::StatusOr<v2::ProcessView> p = v2::ParseProcess(body);
      if (!p.ok()) return CheckError(p.status());
      CheckProcess(*p);
      break;
    }
    case 6: {
      absl::StatusOr<std::vector<v2::ProcessView>> l = v2::ParseProcessList(body);
      if (!l.ok()) return CheckError(l.status());
      for (const v2::ProcessView& p : *l) CheckProcess(p);
      break;
    }
    case 7: {
      absl::StatusOr<v2::LogFrame> f = v2::ParseLogFrame(body);
      if (!f.ok()) return CheckError(f.status());
      if (f->cursor.empty() || f->cursor.size() > 256) Fail(kName, "a frame cursor of a bad length");
      for (char c : f->cursor) {
        if (c <= 0x20 || c >= 0x7f) Fail(kName, "a frame cursor that is not printable ASCII");
      }
      if (f->bytes.size() > body.size()) Fail(kName, "a frame with more bytes than its body");
      if (f->stream < 0 || f->stream > 2) Fail(kName, "a frame of no known stream");
      break;
    }
    case 8: {
      absl::StatusOr<std::string> c = v2::ParseEofCursor(body);
      if (!c.ok()) return CheckError(c.status());
      if (c->size() > body.size()) Fail(kName, "an eof cursor larger than its body");
      break;
    }
    default:
      if (v2::ErrorCodeOf(body).size() > 64) Fail(kName, "an error code over 64 bytes");
  }
}

void Demux(std::string_view body) {
  const std::size_t nsizes = body.empty() ? 0 : static_cast<unsigned char>(body[0]) % 8;
  std::string_view sizes = body.substr(body.empty() ? 0 : 1, nsizes);
  std::string_view stream = body.substr(std::min(body.size(), 1 + nsizes));
  daytona::LogDemuxer whole;
  std::string out1, err1;
  whole.Feed(stream, &out1, &err1);
  daytona::LogDemuxer split;
  std::string out2, err2;
  tether::fuzz::Splitter sp{sizes};
  std::size_t at = 0;
  while (at < stream.size()) {
    const std::size_t n = sp.Size(stream.size() - at);
    split.Feed(stream.substr(at, n), &out2, &err2);
    at += n;
  }
  if (out1 != out2 || err1 != err2) Fail(kName, "a split changed what the demuxer gives");
  if (out1.size() + err1.size() > stream.size()) Fail(kName, "more bytes out than in");
  if (whole.consumed() != stream.size() || split.consumed() != stream.size()) Fail(kName, "consumed() is wrong");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 10 >= 5) {
    V2(data[0] % 10, body);
    return 0;
  }
  switch (data[0] % 10) {
    case 0: {
      absl::StatusOr<daytona::SandboxView> v = daytona::ParseSandbox(body);
      if (!v.ok()) return CheckError(v.status()), 0;
      if (v->id.size() + v->state.size() + v->toolbox_proxy_url.size() > body.size()) {
        Fail(kName, "sandbox fields larger than the body");
      }
      break;
    }
    case 1: {
      absl::StatusOr<std::string> u = daytona::ParseProxyUrl(body);
      if (!u.ok()) return CheckError(u.status()), 0;
      if (u->empty() || u->size() > body.size()) Fail(kName, "a proxy url empty or larger than the body");
      break;
    }
    case 2: {
      absl::StatusOr<std::string> id = daytona::ParseExecAnswer(body);
      if (!id.ok()) return CheckError(id.status()), 0;
      if (id->empty() || id->size() > 256) Fail(kName, "a cmdId of a bad length");
      for (char c : *id) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                        c == '_' || c == '.';
        if (!ok) Fail(kName, "a cmdId with a character unsafe in a path");
      }
      if (id->find_first_not_of('.') == std::string::npos) Fail(kName, "a cmdId of dots only (a path step)");
      break;
    }
    case 3: {
      absl::StatusOr<std::optional<int>> c = daytona::ParseCommandAnswer(body);
      if (!c.ok()) return CheckError(c.status()), 0;
      if (c->has_value() && (**c < 0 || **c > 255)) Fail(kName, "an exit code out of range");
      break;
    }
    default:
      Demux(body);
  }
  return 0;
}
