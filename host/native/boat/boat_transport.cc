#include "host/native/boat/boat_transport.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/internal/condition.h"
#include "host/internal/random.h"
#include "host/native/boat/boat_api.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr int kCallAttempts = 5;                       // a call answered 429 (a PUT also 502/503/504)
constexpr std::chrono::milliseconds kCallBackoff{100};  // doubled per attempt (a 429 without Retry-After)
constexpr std::chrono::seconds kHttpSlack{30};           // a command's HTTP call beyond its timeoutSeconds
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one PUT /files (a supervisor is a few MB)
constexpr int kScriptAttempts = 3;               // a setup script whose call failed: they are idempotent
constexpr std::size_t kDiagnosticsBytes = 4096;      // the stderr tail kept for messages
constexpr std::size_t kMaxFilesAnswer = 1 << 20;     // PUT /files answers: only read for errors

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// The two calls, shared by the transport and every command in flight (a
// command's POST outlives a channel closed early: Boat cannot stop it).
struct BoatApi {
  std::shared_ptr<net::Client> commands;  // request_timeout: timeoutSeconds + kHttpSlack
  std::shared_ptr<net::Client> files;     // request_timeout: kUploadTimeout
  std::string sandbox_id, api_key;
  int timeout_seconds = 120;

  net::Headers Headers() const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", api_key));
    h.emplace_back("Content-Type", "application/json");
    h.emplace_back("Accept", "application/json");
    return h;
  }

  // POST /sandboxes/{id}/commands; `command` is a shell command line, sent
  // as a call of its own (boat::WithCallId). Sent again only after a 429
  // (the service refused it before running it), after its Retry-After; a
  // 5xx is OUTCOME_UNKNOWN (boat::CommandHttpFailure): a caller whose
  // command is safe to run twice may run it again, as a new call.
  asio::awaitable<absl::StatusOr<boat::CommandResult>> Run(std::string command) {
    absl::StatusOr<std::string> body = boat::CommandRequestJson(
        boat::WithCallId(command, absl::BytesToHexString(internal::RandomBytes(8))), timeout_seconds);
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
        co_return boat::Scrub(absl::Status(resp.status().code(), absl::StrCat("boat: ", resp.status().message())),
                              api_key);
      }
      if (net::IsSuccess(*resp)) {
        absl::StatusOr<boat::CommandResult> parsed = boat::ParseCommandResponse(resp->body);
        if (!parsed.ok()) co_return boat::Scrub(parsed.status(), api_key);
        co_return parsed;
      }
      if (resp->status != 429 || attempt >= kCallAttempts) {
        co_return boat::Scrub(boat::CommandHttpFailure(*resp, what, sandbox_id), api_key);
      }
      const std::optional<std::chrono::milliseconds> delay = net::RetryDelay(*resp, backoff);
      if (!delay) {
        co_return boat::Scrub(absl::UnavailableError(absl::StrCat("boat: ", what, " answered 429 with Retry-After ",
                                                                  std::string(resp->header("Retry-After")), ", above the ",
                                                                  net::kMaxRetryAfter.count(), " s tether waits")),
                              api_key);
      }
      co_await Sleep(*delay);
      backoff *= 2;
    }
  }

  // PUT /sandboxes/{id}/files: safe to repeat (the caller names a temporary file).
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes) {
    absl::StatusOr<std::string> body = boat::FileRequestJson(path, bytes);
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
        st = boat::HttpFailure(*resp, what, sandbox_id);
      }
      if (st.code() != absl::StatusCode::kUnavailable || attempt >= kCallAttempts) {
        co_return boat::Scrub(st, api_key);
      }
      std::optional<std::chrono::milliseconds> delay = backoff;
      if (resp.ok() && resp->status == 429) delay = net::RetryDelay(*resp, backoff);
      if (!delay) co_return boat::Scrub(st, api_key);
      co_await Sleep(*delay);
      backoff *= 2;
    }
  }
};

// One command's outcome, filled in by the POST running beside the channel.
struct CommandState {
  explicit CommandState(const asio::any_io_executor& ex) : changed(ex) {}
  std::optional<absl::StatusOr<boat::CommandResult>> result;
  bool closed = false;
  internal::Condition changed;
};

asio::awaitable<void> RunCommand(std::shared_ptr<BoatApi> api, std::shared_ptr<CommandState> state,
                                 std::string command) {
  absl::StatusOr<boat::CommandResult> r = co_await api->Run(std::move(command));
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
    const absl::StatusOr<boat::CommandResult>& r = *state_->result;
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

class BoatTransport final : public native::NativeTransport {
 public:
  BoatTransport(asio::any_io_executor ex, BoatOptions o, std::shared_ptr<BoatApi> api)
      : NativeTransport(ex, {"boat", o.sandbox_id, absl::StrCat("boat sandbox ", o.sandbox_id)},
                        std::move(o.upload_progress)),
        ex_(std::move(ex)),
        api_(std::move(api)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = false;  // stdout and stderr are JSON strings, decoded as UTF-8
    c.stdin_eof = false;    // no stdin at all
    c.streaming = false;    // the output comes when the command has exited
    c.costly_bytes = true;
    c.cut_prone = false;
    return c;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    absl::StatusOr<std::string> line = boat::CommandLine(argv);
    if (!line.ok()) co_return line.status();
    auto state = std::make_shared<CommandState>(ex_);
    asio::co_spawn(ex_, RunCommand(api_, state, *std::move(line)), asio::detached);
    co_return std::unique_ptr<Channel>(new BoatChannel(std::move(state), api_->timeout_seconds));
  }

 protected:
  // The files API into a temporary name beside `path`, then one command
  // checks its sha256, chmods it and renames it into place.
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) override {
    // (Named: g++ 12 destroys a temporary made inside a co_await twice.)
    const Uploader upload = [api = api_](std::string tmp, std::string_view b) { return api->Put(std::move(tmp), b); };
    co_return co_await PutByUpload(std::move(path), bytes, mode, known_missing, boat::kMaxFileBytes, upload);
  }

  // Probe and PutFile's scripts: the script is the command itself (Boat
  // runs it with sh -c), with no stdin. A script whose call failed
  // (UNAVAILABLE) or lost its answer (OUTCOME_UNKNOWN: it may have run)
  // runs again, as a new call: the probe and the file check are
  // idempotent, and the placing script's second run fails harmlessly when
  // the first did its work, which PutByUpload then checks (NoteUnknownRerun).
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) override {
    if (!input.empty()) {
      co_return absl::FailedPreconditionError("boat: a setup script cannot be given stdin (Boat has none)");
    }
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<boat::CommandResult> r = co_await api_->Run(script);
      if (r.ok() && r->timed_out) {
        co_return absl::DeadlineExceededError(absl::StrCat("boat: a setup command ran into its timeout of ",
                                                           api_->timeout_seconds, " s"));
      }
      if (r.ok()) {
        if (r->stdout_text.size() > kMaxScriptOutput) {
          co_return absl::DataLossError("the sandbox answered a setup command with more output than expected");
        }
        ScriptResult out;
        out.out = std::move(r->stdout_text);
        out.diag = r->stderr_text.size() <= kDiagnosticsBytes
                       ? std::move(r->stderr_text)
                       : r->stderr_text.substr(r->stderr_text.size() - kDiagnosticsBytes);
        out.exit_code = r->exit_code;
        co_return out;
      }
      const ErrorCode code = ErrorCodeOf(r.status());
      if ((code != ErrorCode::kUnavailable && code != ErrorCode::kOutcomeUnknown) || attempt >= kScriptAttempts) {
        co_return r.status();
      }
      if (code == ErrorCode::kOutcomeUnknown) NoteUnknownRerun();
      co_await Sleep(backoff);
      backoff *= 2;
    }
  }

 private:
  asio::any_io_executor ex_;
  std::shared_ptr<BoatApi> api_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeBoatTransport(asio::any_io_executor ex, BoatOptions o) {
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("boat: a sandbox id is required (--sandbox ID)");
  if (o.sandbox_id.size() > 128) return absl::InvalidArgumentError("boat: the sandbox id is too long (128 at most)");
  if (!native::PlainId(o.sandbox_id)) {
    return absl::InvalidArgumentError("boat: a sandbox id is letters, digits, '-' and '_'");
  }
  if (o.api_key.empty()) o.api_key = native::Env("BOAT_API_KEY");
  if (o.api_key.empty()) return absl::UnauthenticatedError("boat: set BOAT_API_KEY to your API key");
  if (!native::HeaderSafe(o.api_key)) {
    return absl::InvalidArgumentError("boat: BOAT_API_KEY contains a space or a control character");
  }
  if (o.api_url.empty()) o.api_url = native::Env("BOAT_API_URL");
  if (o.api_url.empty()) {
    return absl::InvalidArgumentError("boat: the API URL is required: --endpoint URL or BOAT_API_URL");
  }
  if (o.command_timeout_seconds < 1 || o.command_timeout_seconds > boat::kMaxTimeoutSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("boat: the command timeout is 1..", boat::kMaxTimeoutSeconds,
                                                   " s (Boat's cap), not ", o.command_timeout_seconds));
  }
  absl::StatusOr<net::Url> url = native::ParseApiUrl("boat", o.api_url);
  if (!url.ok()) return url.status();
  net::ClientOptions co;
  co.url = *url;
  co.tls.ca_file = o.ca_file;
  co.max_body = boat::kMaxResponseBytes;
  co.request_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::seconds(o.command_timeout_seconds) + kHttpSlack);
  absl::StatusOr<std::shared_ptr<net::Client>> commands = net::Client::Make(ex, co);
  if (!commands.ok()) return commands.status();
  co.max_body = kMaxFilesAnswer;
  co.request_timeout = kUploadTimeout;
  absl::StatusOr<std::shared_ptr<net::Client>> files = net::Client::Make(ex, co);
  if (!files.ok()) return files.status();
  auto api = std::make_shared<BoatApi>();
  api->commands = *commands;
  api->files = *files;
  api->sandbox_id = o.sandbox_id;
  api->api_key = o.api_key;
  api->timeout_seconds = o.command_timeout_seconds;
  return std::shared_ptr<Transport>(new BoatTransport(std::move(ex), std::move(o), std::move(api)));
}

}  // namespace tether
