#include "host/native/boat/boat_channel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/escaping.h"
#include "host/support/condition.h"
#include "host/support/random.h"
#include "host/net/retry_after.h"

namespace tether::boat {

namespace asio = boost::asio;

asio::awaitable<absl::StatusOr<CommandResult>> BoatApi::Run(std::string command) {
  absl::StatusOr<std::string> body = CommandRequestJson(
      WithCallId(command, absl::BytesToHexString(internal::RandomBytes(8))), timeout_seconds);
  if (!body.ok()) co_return body.status();
  const std::string what = absl::StrCat("POST /sandboxes/", sandbox_id, "/commands");
  std::chrono::milliseconds backoff = kCallBackoff;
  for (int attempt = 1;; ++attempt) {
    net::Request r;
    r.method = "POST";
    r.target = absl::StrCat("/sandboxes/", net::UrlEncode(sandbox_id), "/commands");
    r.headers = Headers();
    r.body = *body;
    absl::StatusOr<net::Response> resp = co_await commands->Call(std::move(r));
    if (!resp.ok()) {
      co_return Scrub(absl::Status(resp.status().code(), absl::StrCat("boat: ", resp.status().message())),
                            api_key);
    }
    if (net::IsSuccess(*resp)) {
      absl::StatusOr<CommandResult> parsed = ParseCommandResponse(resp->body);
      if (!parsed.ok()) co_return Scrub(parsed.status(), api_key);
      co_return parsed;
    }
    if (resp->status != 429 || attempt >= kCallAttempts) {
      co_return Scrub(CommandHttpFailure(*resp, what, sandbox_id), api_key);
    }
    const std::optional<std::chrono::milliseconds> delay = net::RetryDelay(*resp, backoff);
    if (!delay) {
      co_return Scrub(absl::UnavailableError(absl::StrCat("boat: ", what, " answered 429 with Retry-After ",
                                                                std::string(resp->header("Retry-After")), ", above the ",
                                                                net::kMaxRetryAfter.count(), " s tether waits")),
                            api_key);
    }
    co_await Sleep(*delay);
    backoff *= 2;
  }
}

asio::awaitable<absl::Status> BoatApi::Put(std::string path, std::string_view bytes) {
  absl::StatusOr<std::string> body = FileRequestJson(path, bytes);
  if (!body.ok()) co_return body.status();
  const std::string what = absl::StrCat("PUT /sandboxes/", sandbox_id, "/files (", path, ")");
  std::chrono::milliseconds backoff = kCallBackoff;
  for (int attempt = 1;; ++attempt) {
    net::Request r;
    r.method = "PUT";
    r.target = absl::StrCat("/sandboxes/", net::UrlEncode(sandbox_id), "/files");
    r.headers = Headers();
    r.body = *body;
    absl::StatusOr<net::Response> resp = co_await files->Call(std::move(r));
    absl::Status st;
    if (!resp.ok()) {
      st = absl::Status(resp.status().code(), absl::StrCat("boat: uploading ", path, ": ", resp.status().message()));
    } else if (net::IsSuccess(*resp)) {
      co_return absl::OkStatus();
    } else {
      st = HttpFailure(*resp, what, sandbox_id);
    }
    if (st.code() != absl::StatusCode::kUnavailable || attempt >= kCallAttempts) {
      co_return Scrub(st, api_key);
    }
    std::optional<std::chrono::milliseconds> delay = backoff;
    if (resp.ok() && resp->status == 429) delay = net::RetryDelay(*resp, backoff);
    if (!delay) co_return Scrub(st, api_key);
    co_await Sleep(*delay);
    backoff *= 2;
  }
}

namespace {

// One command's outcome, filled in by the POST running beside the channel.
struct CommandState {
  explicit CommandState(const asio::any_io_executor& ex) : changed(ex) {}
  std::optional<absl::StatusOr<CommandResult>> result;
  bool closed = false;
  internal::Condition changed;
};

asio::awaitable<void> RunCommand(std::shared_ptr<BoatApi> api, std::shared_ptr<CommandState> state,
                                 std::string command) {
  absl::StatusOr<CommandResult> r = co_await api->Run(std::move(command));
  state->result = std::move(r);
  state->changed.NotifyAll();
}

// A one-shot command as a Channel: its stdout once the POST has returned,
// then EOF; no stdin.
class BoatChannel final : public Channel {
 public:
  BoatChannel(std::shared_ptr<CommandState> state, int timeout_seconds)
      : state_(std::move(state)), timeout_seconds_(timeout_seconds) {}
  ~BoatChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (buf.empty()) co_return absl::InvalidArgumentError("boat: ReadSome with an empty buffer");
    while (!state_->closed && !state_->result) {
      const bool woken = co_await state_->changed.Wait();  // (g++ 12: no co_await in a condition)
      if (!woken) co_return absl::CancelledError("boat: reading the command's output: cancelled");
    }
    if (state_->closed) co_return absl::UnavailableError("boat: the command's channel was closed");
    const absl::StatusOr<CommandResult>& r = *state_->result;
    if (!r.ok()) co_return r.status();
    if (r->timed_out) {
      co_return absl::DeadlineExceededError(absl::StrCat(
          "boat: the command ran into its timeout of ", timeout_seconds_, " s and Boat stopped it",
          r->stderr_text.empty() ? "" : absl::StrCat(" (stderr: ", Tail(r->stderr_text), ")")));
    }
    const std::size_t n = std::min(buf.size(), r->stdout_text.size() - offset_);
    std::memcpy(buf.data(), r->stdout_text.data() + offset_, n);
    offset_ += n;
    co_return n;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (state_->closed) co_return absl::UnavailableError("boat: the command's channel was closed");
    if (bytes.empty()) co_return absl::OkStatus();
    co_return absl::FailedPreconditionError(
        "boat: a Boat command has no stdin (its REST API runs one-shot commands); input goes through the "
        "exchange tunnel instead");
  }
  void CloseWrite() override {}
  void Close() override {
    if (state_->closed) return;
    state_->closed = true;
    state_->changed.NotifyAll();
  }
  std::optional<int> exit_code() const override {
    if (!state_->result || !state_->result->ok() || (*state_->result)->timed_out) return std::nullopt;
    return (*state_->result)->exit_code;
  }
  std::string Diagnostics() const override {
    if (!state_->result || !state_->result->ok()) return {};
    return Tail((*state_->result)->stderr_text);
  }

 private:
  static std::string Tail(const std::string& s) {
    return s.size() <= kDiagnosticsBytes ? s : s.substr(s.size() - kDiagnosticsBytes);
  }

  std::shared_ptr<CommandState> state_;
  int timeout_seconds_;
  std::size_t offset_ = 0;
};

}  // namespace

std::unique_ptr<Channel> StartCommand(const asio::any_io_executor& ex, std::shared_ptr<BoatApi> api,
                                      std::string command) {
  auto state = std::make_shared<CommandState>(ex);
  const int timeout_seconds = api->timeout_seconds;
  asio::co_spawn(ex, RunCommand(std::move(api), state, std::move(command)), asio::detached);
  return std::unique_ptr<Channel>(new BoatChannel(std::move(state), timeout_seconds));
}

}  // namespace tether::boat
