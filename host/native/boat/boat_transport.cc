#include "tether/providers/boat.h"

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
#include "host/support/condition.h"
#include "host/support/random.h"
#include "host/native/boat/boat_api.h"
#include "host/native/boat/boat_channel.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::seconds kHttpSlack{30};           // a command's HTTP call beyond its timeoutSeconds
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one PUT /files (a supervisor is a few MB)
constexpr int kScriptAttempts = 3;               // a setup script whose call failed: they are idempotent
constexpr std::size_t kMaxFilesAnswer = 1 << 20;     // PUT /files answers: only read for errors

using boat::BoatApi;
using boat::kCallBackoff;
using boat::kDiagnosticsBytes;
using boat::Sleep;

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
    co_return boat::StartCommand(ex_, api_, *std::move(line));
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
  if (absl::Status st = native::CheckId("boat", "sandbox id", "--sandbox ID", o.sandbox_id); !st.ok()) return st;
  if (absl::Status st = native::ApiKeyOrEnv("boat", "BOAT_API_KEY", o.api_key); !st.ok()) return st;
  if (o.api_url.empty()) o.api_url = native::Env("BOAT_API_URL");
  if (o.api_url.empty()) {
    return absl::InvalidArgumentError("boat: the API URL is required: --endpoint URL or BOAT_API_URL");
  }
  if (o.command_timeout_seconds < 1 || o.command_timeout_seconds > boat::kMaxTimeoutSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("boat: the command timeout is 1..", boat::kMaxTimeoutSeconds,
                                                   " s (Boat's cap), not ", o.command_timeout_seconds));
  }
  absl::StatusOr<net::ClientOptions> api_options = native::ApiClientOptions("boat", o.api_url, o.ca_file);
  if (!api_options.ok()) return api_options.status();
  net::ClientOptions co = *std::move(api_options);
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
