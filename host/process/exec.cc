#include "tether/exec.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "tether/output_helpers.h"

namespace tether {

namespace asio = boost::asio;

namespace {

asio::awaitable<absl::Status> WriteAllThenEof(Process& p, std::string_view data) {
  while (!data.empty()) {
    const std::size_t n = std::min(data.size(), kMaxWriteBytes);
    if (absl::Status st = co_await p.Write(data.substr(0, n)); !st.ok()) co_return st;
    data.remove_prefix(n);
  }
  co_return co_await p.CloseStdin();
}

void Capture(std::string* into, bool* truncated, std::string_view bytes, std::size_t limit) {
  const std::size_t room = limit - std::min(limit, into->size());
  into->append(bytes.substr(0, room));
  if (bytes.size() > room) *truncated = true;
}

}  // namespace

asio::awaitable<absl::StatusOr<ExecResult>> Exec(Transport& transport, ExecOptions options) {
  options.start.stdin_pipe = options.stdin.has_value();
  // Capture needs the exact bytes and all of them (capture_limit bounds what
  // is kept); callbacks see text unless bytes were asked for.
  const bool text_callbacks = options.start.output_format == OutputFormat::kText;
  options.start.output_format = OutputFormat::kBytes;
  options.start.output_mode = OutputMode::kStream;
  options.start.max_output_bytes = 0;
  absl::StatusOr<std::unique_ptr<Process>> started = co_await Process::Start(transport, options.start);
  if (!started.ok()) co_return started.status();
  Process& p = **started;
  auto ex = co_await asio::this_coro::executor;

  // Input and output at once: a child that answers as it reads never waits
  // on us.
  bool input_done = !options.stdin.has_value();
  absl::Status input_status;
  asio::steady_timer input_joined(ex, asio::steady_timer::time_point::max());
  if (options.stdin) {
    asio::co_spawn(ex, WriteAllThenEof(p, *options.stdin), [&](std::exception_ptr e, absl::Status st) {
      if (e) std::rethrow_exception(e);
      input_status = std::move(st);
      input_done = true;
      input_joined.cancel();
    });
  }

  ExecResult r;
  std::string carry[4];  // text callbacks: an incomplete character per stream
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> c = co_await p.Read();
    if (!c.ok()) {
      r.error = c.status();
      break;
    }
    if (!*c) {
      if (options.on_output && text_callbacks) {
        for (int i = 1; i < 4; ++i) {  // the streams' ends: incomplete characters become U+FFFD
          if (carry[i].empty()) continue;
          OutputChunk rest{static_cast<StreamId>(i), 0, DecodeUtf8Prefix(carry[i], carry[i].size() * 3, true).text};
          if (absl::Status st = co_await options.on_output(rest); !st.ok()) {
            r.error = std::move(st);
            break;
          }
        }
      }
      break;
    }
    const OutputChunk& chunk = **c;
    if (chunk.stream == StreamId::kStderr) {
      Capture(&r.stderr_bytes, &r.stderr_truncated, chunk.bytes, options.capture_limit);
    } else {
      Capture(&r.stdout_bytes, &r.stdout_truncated, chunk.bytes, options.capture_limit);
    }
    if (options.on_output) {
      OutputChunk shown = chunk;
      if (text_callbacks) {
        std::string& held = carry[static_cast<int>(chunk.stream)];
        held += chunk.bytes;
        Utf8Prefix d = DecodeUtf8Prefix(held, held.size() * 3, false);
        shown.offset = chunk.offset - (held.size() - chunk.bytes.size());
        shown.bytes = std::move(d.text);
        held.erase(0, d.used);
        if (shown.bytes.empty()) continue;
      }
      if (absl::Status st = co_await options.on_output(shown); !st.ok()) {
        r.error = std::move(st);
        break;
      }
    }
  }
  if (r.error.ok()) {
    absl::StatusOr<ExitStatus> exit = co_await p.Wait();
    if (exit.ok()) {
      r.exit = *exit;
    } else {
      r.error = exit.status();
    }
  }
  // The input side borrows `p`: stop it (a failed observation disconnects
  // the handle) and join it before `p` goes away.
  if (!r.error.ok()) co_await p.Disconnect();
  while (!input_done) co_await input_joined.async_wait(asio::as_tuple(asio::use_awaitable));
  if (r.error.ok() && !input_status.ok() && !r.exit) r.error = input_status;
  co_return r;
}

}  // namespace tether
