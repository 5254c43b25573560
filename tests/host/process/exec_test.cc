#include "tether/exec.h"

#include <doctest.h>

#include <string>

#include "tether/output_helpers.h"
#include "tests/host/test_util.h"

namespace tether {
namespace {

namespace asio = boost::asio;

std::vector<std::string> Sh(std::string script) { return {"sh", "-c", std::move(script)}; }

TEST_CASE("exec captures exact bytes per stream and shows every chunk to the callback") {
  testing::RunLocal("tether-exec-test", [](Transport& t) -> asio::awaitable<void> {
    std::string seen_out, seen_err;
    ExecOptions o;
    o.start.argv = Sh("printf '\\000\\377out'; printf 'err' >&2; exit 3");
    o.on_output = [&](const OutputChunk& c) -> asio::awaitable<absl::Status> {
      (c.stream == StreamId::kStderr ? seen_err : seen_out) += c.bytes;
      co_return absl::OkStatus();
    };
    absl::StatusOr<ExecResult> r = co_await Exec(t, o);
    REQUIRE(r.ok());
    CHECK(r->error.ok());
    REQUIRE(r->exit.has_value());
    CHECK(r->exit->code == 3);
    CHECK(r->stdout_bytes == std::string("\0\xffout", 5));
    CHECK(r->stderr_bytes == "err");
    // Callbacks get text by default: the invalid byte as U+FFFD, NUL kept.
    CHECK(seen_out == std::string("\0\xEF\xBF\xBDout", 7));
    CHECK(seen_err == r->stderr_bytes);
  });
}

TEST_CASE("exec callbacks see whole characters when a character is split between writes, or bytes if asked") {
  for (const bool bytes : {false, true}) {
    testing::RunLocal("tether-exec-test", [bytes](Transport& t) -> asio::awaitable<void> {
      std::string seen;
      ExecOptions o;
      // "é" (C3 A9) split across two writes a moment apart, then a lone
      // lead byte at the very end.
      o.start.argv = Sh("printf 'a\303'; sleep 0.2; printf '\251b\342'");
      if (bytes) o.start.output_format = OutputFormat::kBytes;
      o.on_output = [&](const OutputChunk& c) -> asio::awaitable<absl::Status> {
        if (!bytes) CHECK(c.bytes == SanitizeUtf8(c.bytes));  // every chunk valid on its own
        seen += c.bytes;
        co_return absl::OkStatus();
      };
      absl::StatusOr<ExecResult> r = co_await Exec(t, o);
      REQUIRE(r.ok());
      CHECK(r->stdout_bytes == "a\xC3\xA9" "b\xE2");
      CHECK(seen == (bytes ? std::string("a\xC3\xA9" "b\xE2") : std::string("a\xC3\xA9" "b\xEF\xBF\xBD")));
    });
  }
}

TEST_CASE("exec feeds finite stdin then EOF, and bounds the capture without bounding the callback") {
  testing::RunLocal("tether-exec-test", [](Transport& t) -> asio::awaitable<void> {
    std::size_t seen = 0;
    ExecOptions o;
    o.start.argv = Sh("cat; wc -c < /dev/null >&2");
    o.stdin = std::string(300000, 'q');
    o.capture_limit = 1000;
    o.on_output = [&](const OutputChunk& c) -> asio::awaitable<absl::Status> {
      if (c.stream == StreamId::kStdout) seen += c.bytes.size();
      co_return absl::OkStatus();
    };
    absl::StatusOr<ExecResult> r = co_await Exec(t, o);
    REQUIRE(r.ok());
    CHECK(r->error.ok());
    CHECK(r->stdout_bytes == std::string(1000, 'q'));
    CHECK(r->stdout_truncated);
    CHECK_FALSE(r->stderr_truncated);
    CHECK(seen == 300000);
    CHECK(r->exit->code == 0);
  });
}

TEST_CASE("a failing callback ends observation with its error and keeps what was captured") {
  testing::RunLocal("tether-exec-test", [](Transport& t) -> asio::awaitable<void> {
    ExecOptions o;
    o.start.argv = Sh("echo first; sleep 1; echo second");
    o.start.linger_ms = 200;  // nobody will come back for this record
    o.on_output = [](const OutputChunk&) -> asio::awaitable<absl::Status> {
      co_return absl::InternalError("renderer broke");
    };
    absl::StatusOr<ExecResult> r = co_await Exec(t, o);
    REQUIRE(r.ok());
    CHECK(r->error.message() == "renderer broke");
    CHECK(r->stdout_bytes == "first\n");
    CHECK_FALSE(r->exit.has_value());  // not confirmed: never guessed
  });
}

TEST_CASE("exec rejects a bad request before starting anything") {
  testing::RunLocal("tether-exec-test", [](Transport& t) -> asio::awaitable<void> {
    ExecOptions o;
    CHECK(absl::IsInvalidArgument((co_await Exec(t, o)).status()));
  });
}

}  // namespace
}  // namespace tether
