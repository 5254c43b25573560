#include "host/conformance/harness.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/escaping.h"
#include "host/support/random.h"

namespace tether::conformance {

namespace asio = boost::asio;
using asio::awaitable;
using std::chrono::milliseconds;

std::string Random(std::size_t n) { return internal::RandomBytes(n); }

absl::Status Fail(std::string what) { return absl::InternalError(std::move(what)); }
absl::Status Unsupported(std::string what) { return absl::UnimplementedError(std::move(what)); }

std::string Show(std::string_view bytes) {
  std::string s = absl::CHexEscape(std::string(bytes.substr(0, 120)));
  if (bytes.size() > 120) absl::StrAppend(&s, "... (", bytes.size(), " bytes)");
  return s;
}

StartOptions Opts(std::vector<std::string> argv) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  return o;
}

awaitable<void> ReadAll(Process& p, Ran* r) {
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> c = co_await p.Read();
    if (!c.ok()) {
      if (r->status.ok()) r->status = c.status();
      break;
    }
    if (!*c) break;
    ((*c)->stream == StreamId::kStderr ? r->err : r->out) += (*c)->bytes;
  }
}

awaitable<absl::Status> WriteAll(Process& p, std::string_view data) {
  for (std::size_t i = 0; i < data.size(); i += kMaxWriteBytes) {
    if (absl::Status st = co_await p.Write(data.substr(i, kMaxWriteBytes)); !st.ok()) co_return st;
  }
  co_return co_await p.CloseStdin();
}

// Starts `o`, feeds `input` (then EOF) while reading everything, and waits.
awaitable<Ran> Run(Transport& t, StartOptions o, std::optional<std::string> input) {
  Ran r;
  o.stdin_pipe = o.stdin_pipe || input.has_value();
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, std::move(o));
  if (!p.ok()) {
    r.status = p.status();
    co_return r;
  }
  Process& proc = **p;
  bool wrote = !input.has_value();
  absl::Status write_status;
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer joined(ex, asio::steady_timer::time_point::max());
  if (input) {
    asio::co_spawn(ex, WriteAll(proc, *input), [&](std::exception_ptr, absl::Status st) {
      write_status = st;
      wrote = true;
      joined.cancel();
    });
  }
  co_await ReadAll(proc, &r);
  absl::StatusOr<ExitStatus> e = co_await proc.Wait();
  if (e.ok()) {
    r.exit = *e;
  } else if (r.status.ok()) {
    r.status = e.status();
  }
  while (!wrote) co_await joined.async_wait(asio::as_tuple(asio::use_awaitable));
  if (r.status.ok() && !write_status.ok()) r.status = write_status;
  co_return r;
}

awaitable<Ran> RunArgv(Transport& t, std::vector<std::string> argv) {
  co_return co_await Run(t, Opts(std::move(argv)), std::nullopt);
}

std::string AllBytes(int repeat) {
  std::string s;
  for (int r = 0; r < repeat; ++r) {
    for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
  }
  return s;
}

std::string PrintfFormat(std::string_view bytes) {
  std::string f;
  for (unsigned char c : bytes) absl::StrAppend(&f, "\\", absl::Dec(c >> 6), absl::Dec(c >> 3 & 7), absl::Dec(c & 7));
  return f;
}

std::string Seq(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) absl::StrAppend(&s, i, "\n");
  return s;
}

awaitable<absl::StatusOr<std::string>> ReadAtLeast(Process& p, std::size_t n) {
  std::string got;
  while (got.size() < n) {
    auto c = co_await p.Read();
    if (!c.ok()) co_return c.status();
    if (!*c) break;
    got += (*c)->bytes;
  }
  co_return got;
}

}  // namespace tether::conformance
