// Helpers shared by the conformance cases (host/conformance/cases_*.cc):
// running a command to the end, reading and writing everything, and the
// CONF_EXPECT macro that turns a failed expectation into the case's result.
// Private to the tether_conformance target.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "host/support/sleep.h"
#include "tether/process.h"
#include "tether/transport.h"

namespace tether::conformance {

// (g++ 12 mishandles braced lists of strings inside coroutines: build argv
// in ordinary functions.)
template <typename... A>
std::vector<std::string> V(A&&... a) {
  return std::vector<std::string>{std::string(std::forward<A>(a))...};
}

// `n` random bytes.
std::string Random(std::size_t n);
// A failed case, and one the sandbox cannot run (kUnimplemented).
absl::Status Fail(std::string what);
absl::Status Unsupported(std::string what);
// Up to 120 bytes, escaped, for a failure's detail.
std::string Show(std::string_view bytes);

// In a case (a coroutine returning absl::Status): fails it unless `cond`.
#define CONF_EXPECT(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond)) co_return ::tether::conformance::Fail(absl::StrCat(#cond, ": ", __VA_ARGS__)); \
  } while (0)

using internal::Sleep;  // (host/support/sleep.h)
// Stream mode, exact bytes.
StartOptions Opts(std::vector<std::string> argv);

struct Ran {
  std::string out, err;
  std::optional<ExitStatus> exit;
  absl::Status status;  // the first failure, if any
};

// Reads every chunk into r->out / r->err.
boost::asio::awaitable<void> ReadAll(Process& p, Ran* r);
// Writes `data` in kMaxWriteBytes pieces, then closes stdin.
boost::asio::awaitable<absl::Status> WriteAll(Process& p, std::string_view data);
// Starts `o`, feeds `input` (then EOF) while reading everything, and waits.
boost::asio::awaitable<Ran> Run(Transport& t, StartOptions o, std::optional<std::string> input);
boost::asio::awaitable<Ran> RunArgv(Transport& t, std::vector<std::string> argv);
// Reads stdout until at least `n` bytes arrived.
boost::asio::awaitable<absl::StatusOr<std::string>> ReadAtLeast(Process& p, std::size_t n);

// Every byte value, `repeat` times.
std::string AllBytes(int repeat);
// A printf format (for sh's printf) that prints exactly `bytes`.
std::string PrintfFormat(std::string_view bytes);
// "1\n2\n...n\n"
std::string Seq(int n);

}  // namespace tether::conformance
