// Fuzz target: what the boxd provider makes of hostile bytes
// (host/native/boxd/): the token exchange's JSON answer
// (boxd::ParseTokenAnswer: from the network, maybe an endpoint that lies),
// an Exec answer chunk as gRPC hands it over (protobuf bytes, then
// boxd::ExitStatus on its exit_code), and the command line made of an argv
// (boxd::CommandLine: every argument must come back out of the shell
// quoting exactly).
//
// Input: the first byte picks the part (mod 3); the rest is its input (for
// the command line: arguments separated by '\n').
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/native/boxd/boxd_channel.h"
#include "host/native/boxd/boxd_session.h"

namespace {

using tether::fuzz::Fail;

// The arguments of "exec 'a' 'b'..." as a POSIX shell reads them, for the
// quoting CommandLine makes: words of '...' pieces and \' between them.
bool Unquote(std::string_view line, std::vector<std::string>* out) {
  if (line.substr(0, 4) != "exec") return false;
  std::size_t i = 4;
  while (i < line.size()) {
    if (line[i] != ' ') return false;
    ++i;
    std::string word;
    bool any = false;
    while (i < line.size() && line[i] != ' ') {
      if (line[i] == '\'') {
        const std::size_t close = line.find('\'', i + 1);
        if (close == std::string_view::npos) return false;
        word.append(line.substr(i + 1, close - i - 1));
        i = close + 1;
        any = true;
      } else if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '\'') {
        word.push_back('\'');
        i += 2;
        any = true;
      } else {
        return false;
      }
    }
    if (!any) return false;
    out->push_back(std::move(word));
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      absl::StatusOr<tether::boxd::Jwt> j = tether::boxd::ParseTokenAnswer(in);
      if (!j.ok()) {
        if (j.status().message().empty()) Fail("boxd_response", "an error without a message");
        return 0;
      }
      if (in.size() > tether::boxd::kMaxAuthAnswerBytes) Fail("boxd_response", "accepted more than the size limit");
      if (j->token.empty() || j->token.size() > tether::boxd::kMaxTokenBytes) Fail("boxd_response", "a token out of bounds");
      for (char c : j->token) {
        if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) Fail("boxd_response", "a token unfit for a header");
      }
      return 0;
    }
    case 1: {
      ::boxd::api::v1::ExecChunk chunk;
      if (!chunk.ParseFromArray(in.data(), static_cast<int>(in.size()))) return 0;
      const std::optional<int> code = tether::boxd::ExitStatus(true, chunk.exit_code() != 0
                                                                          ? std::optional<int>(chunk.exit_code())
                                                                          : std::nullopt);
      if (!code) Fail("boxd_response", "a call that ended OK without an exit status");
      if (chunk.exit_code() < 0 && (*code < 129 || *code > 255)) Fail("boxd_response", "a signal's status out of range");
      if (tether::boxd::ExitStatus(false, chunk.exit_code())) Fail("boxd_response", "an exit status for a call that was cut");
      return 0;
    }
    default: {
      std::vector<std::string> argv;
      std::size_t start = 0;
      while (start <= in.size()) {
        const std::size_t nl = in.find('\n', start);
        const std::size_t end = nl == std::string_view::npos ? in.size() : nl;
        argv.emplace_back(in.substr(start, end - start));
        start = end + 1;
      }
      absl::StatusOr<std::string> line = tether::boxd::CommandLine(argv);
      if (!line.ok()) return 0;
      if (line->size() > tether::boxd::kMaxCommandBytes) Fail("boxd_response", "a command line over the limit");
      std::vector<std::string> back;
      if (!Unquote(*line, &back) || back != argv) Fail("boxd_response", "the quoting does not give the argv back");
      return 0;
    }
  }
}
