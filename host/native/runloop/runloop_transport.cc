#include "tether/providers/runloop.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "host/support/condition.h"
#include "host/support/random.h"
#include "host/native/runloop/runloop_api.h"
#include "host/native/runloop/runloop_calls.h"
#include "host/native/runloop/runloop_channel.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "protocol/sha256.h"
#include "tether/errors.h"
#include "tether/output_helpers.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDefaultBaseUrl = "https://api.runloop.ai";  // the SDK's default
constexpr int kProbeAttempts = 3;                      // stdin probes that lost an answer, in a row

using runloop::kCallAttempts;
using runloop::kCallBackoff;
using runloop::kCallTimeout;
using runloop::kMaxBackoff;
using runloop::kUploadTimeout;
using runloop::RunloopApi;
using runloop::Sleep;
using runloop::StdinVerdict;
using runloop::Tail;

// The probe Prepare() runs: reads one line and prints it back.
constexpr std::string_view kStdinProbe = "IFS= read -r l; printf 'tether-stdin:%s\\n' \"$l\"";

class RunloopTransport final : public native::NativeTransport {
 public:
  RunloopTransport(asio::any_io_executor ex, RunloopOptions o, std::shared_ptr<RunloopApi> api)
      : NativeTransport(ex, {"runloop", o.devbox_id, absl::StrCat("runloop devbox ", o.devbox_id)}, o.upload_progress),
        ex_(std::move(ex)),
        o_(std::move(o)),
        api_(std::move(api)),
        verdict_(std::make_shared<StdinVerdict>()) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = false;  // JSON strings both ways, output decoded as UTF-8
    c.costly_bytes = true;
    if (OneShot()) {
      c.stdin_eof = false;
      c.streaming = false;
      c.cut_prone = false;
    } else {
      c.stdin_eof = true;   // send_std_in's EOF signal
      c.streaming = true;
      c.cut_prone = true;   // SSE streams end every few seconds
    }
    return c;
  }
  asio::awaitable<absl::Status> Prepare() override {
    if (o_.mode != RunloopOptions::Mode::kAuto || verdict_->state != StdinVerdict::kUnknown) {
      co_return absl::OkStatus();
    }
    absl::Status last;
    for (int attempt = 0; attempt < kProbeAttempts; ++attempt) {
      absl::StatusOr<std::optional<bool>> kills = co_await ProbeStdin();
      if (kills.ok() && kills->has_value()) {
        verdict_->state = **kills ? StdinVerdict::kKills : StdinVerdict::kWorks;
        co_return absl::OkStatus();
      }
      // A probe whose start or input lost its answer: a new probe is a new
      // call (the probe is harmless to run twice; one whose start was lost
      // waits on a stdin nobody writes).
      if (!kills.ok() && ErrorCodeOf(kills.status()) != ErrorCode::kOutcomeUnknown) co_return kills.status();
      last = kills.ok() ? absl::UnavailableError("the probe's input lost its answer") : kills.status();
    }
    co_return absl::UnavailableError(absl::StrCat("runloop: could not tell whether stdin kills executions: ",
                                                  kProbeAttempts, " probes lost their answers (", last.message(),
                                                  ")"));
  }

  // One stdin probe: whether sending stdin killed it; nullopt when its
  // input's answer was lost and what the probe did is unknown.
  asio::awaitable<absl::StatusOr<std::optional<bool>>> ProbeStdin() {
    absl::StatusOr<runloop::ExecutionView> v = co_await api_->StartAsync(std::string(kStdinProbe));
    if (!v.ok()) co_return v.status();
    const std::string eid = v->execution_id;
    absl::StatusOr<std::string> line = runloop::SendStdinJson("ok\n");
    absl::StatusOr<net::Response> resp =
        co_await api_->Post(api_->ExecPath(eid, "send_std_in"), *line, RunloopApi::Repeat::kOnce);
    if (!resp.ok() || resp->status >= 500) {
      // The line may have been applied: never sent again. The kill (safe
      // to repeat) answers with the view that says whether the probe read it.
      resp = co_await api_->Post(api_->ExecPath(eid, "kill"), runloop::KillJson(), RunloopApi::Repeat::kAnyFailure);
      absl::StatusOr<runloop::ExecutionView> killed = api_->View(resp, "POST .../kill");
      if (killed.ok() && killed->completed() && killed->exit_status == 0 &&
          killed->stdout_text == "tether-stdin:ok\n") {
        co_return std::optional<bool>(false);
      }
      co_return std::optional<bool>();
    }
    absl::StatusOr<runloop::ExecutionView> after = api_->View(resp, "POST .../send_std_in");
    if (!after.ok()) {
      // A 4xx here: the execution was gone by the time stdin arrived.
      if (after.status().code() != absl::StatusCode::kInvalidArgument) co_return after.status();
      co_return std::optional<bool>(true);
    }
    if (after->completed()) co_return std::optional<bool>(true);
    absl::StatusOr<runloop::ExecutionView> done = co_await api_->WaitCompleted(eid);
    if (!done.ok()) co_return done.status();
    co_return std::optional<bool>(done->exit_status != 0 || done->stdout_text != "tether-stdin:ok\n");
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    absl::StatusOr<std::string> line = runloop::CommandLine(argv);
    if (!line.ok()) co_return line.status();
    if (OneShot()) co_return runloop::StartOneShotChannel(ex_, api_, *std::move(line));
    absl::StatusOr<runloop::ExecutionView> v = co_await api_->StartAsync(*std::move(line));
    if (!v.ok()) co_return v.status();
    co_return runloop::StartStreamChannel(ex_, api_, verdict_, v->execution_id);
  }

 protected:
  // upload_file into a temporary name beside `path`, then one command
  // checks its sha256, chmods and renames it: never a partial file at `path`.
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) override {
    if (path.empty() || path[0] != '/' || !IsValidUtf8(path) || path.find('\0') != std::string::npos ||
        path.size() > kMaxSandboxPath) {
      co_return absl::InvalidArgumentError("runloop: an upload path must be absolute UTF-8 without NUL");
    }
    // (Named: g++ 12 destroys a temporary made inside a co_await twice.)
    const Uploader upload = [this](std::string tmp, std::string_view b) { return Upload(std::move(tmp), b); };
    co_return co_await PutByUpload(std::move(path), bytes, mode, known_missing, runloop::kMaxFileBytes, upload);
  }

  // Probe and PutFile's scripts: one synchronous execute per script (no
  // stdin; every setup script is idempotent).
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) override {
    if (!input.empty()) {
      co_return absl::FailedPreconditionError("runloop: setup scripts run without stdin here");
    }
    absl::StatusOr<std::string> line = runloop::CommandLine({"/bin/sh", "-c", script});
    if (!line.ok()) co_return line.status();
    absl::StatusOr<runloop::ExecutionView> v = co_await api_->RunOnce(*std::move(line));
    if (!v.ok()) co_return v.status();
    if (v->stdout_text.size() > kMaxScriptOutput) {
      co_return absl::DataLossError("the devbox answered a setup command with more output than expected");
    }
    ScriptResult out;
    out.out = std::move(v->stdout_text);
    out.diag = Tail(v->stderr_text);
    out.exit_code = v->exit_status.value_or(-1);
    co_return out;
  }

 private:
  bool OneShot() const {
    return o_.mode == RunloopOptions::Mode::kExchange ||
           (o_.mode == RunloopOptions::Mode::kAuto && verdict_->state == StdinVerdict::kKills);
  }

  // POST upload_file (multipart): safe to repeat (a temporary name); a 429
  // waits its Retry-After.
  asio::awaitable<absl::Status> Upload(std::string path, std::string_view bytes) {
    std::string boundary;
    std::string body;
    do {
      boundary = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(16)));
    } while (bytes.find(boundary) != std::string_view::npos);
    body = runloop::MultipartBody(boundary, path, bytes);
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      net::Request r;
      r.method = "POST";
      r.target = absl::StrCat(api_->Base(), "/upload_file");
      r.headers = api_->Headers(absl::StrCat("multipart/form-data; boundary=", boundary));
      r.body = body;
      absl::StatusOr<net::Response> resp = co_await api_->files->Call(std::move(r));
      absl::Status st;
      if (!resp.ok()) {
        st = absl::Status(resp.status().code(),
                          absl::StrCat("runloop: uploading ", path, ": ", resp.status().message()));
      } else if (net::IsSuccess(*resp)) {
        co_return absl::OkStatus();
      } else {
        st = runloop::HttpFailure(*resp, absl::StrCat("POST .../upload_file (", path, ")"), o_.devbox_id);
      }
      if (st.code() != absl::StatusCode::kUnavailable || attempt >= kCallAttempts) co_return api_->Fail(st);
      std::optional<std::chrono::milliseconds> delay = backoff;
      if (resp.ok() && resp->status == 429) delay = net::RetryDelay(*resp, backoff);
      if (!delay) co_return api_->Fail(st);
      co_await Sleep(*delay);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  asio::any_io_executor ex_;
  RunloopOptions o_;
  std::shared_ptr<RunloopApi> api_;
  std::shared_ptr<StdinVerdict> verdict_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeRunloopTransport(asio::any_io_executor ex, RunloopOptions o) {
  if (absl::Status st = native::CheckId("runloop", "devbox id", "--devbox ID", o.devbox_id); !st.ok()) return st;
  if (absl::Status st = native::ApiKeyOrEnv("runloop", "RUNLOOP_API_KEY", o.api_key); !st.ok()) return st;
  if (o.api_url.empty()) o.api_url = native::Env("RUNLOOP_BASE_URL");
  if (o.api_url.empty()) o.api_url = std::string(kDefaultBaseUrl);
  absl::StatusOr<net::ClientOptions> api_options = native::ApiClientOptions("runloop", o.api_url, o.ca_file);
  if (!api_options.ok()) return api_options.status();
  net::ClientOptions co = *std::move(api_options);
  co.max_body = runloop::kMaxViewBytes;
  co.request_timeout = kCallTimeout;
  absl::StatusOr<std::shared_ptr<net::Client>> calls = net::Client::Make(ex, co);
  if (!calls.ok()) return calls.status();
  co.max_body = 1 << 20;  // upload_file answers: only read for errors
  co.request_timeout = kUploadTimeout;
  absl::StatusOr<std::shared_ptr<net::Client>> files = net::Client::Make(ex, co);
  if (!files.ok()) return files.status();
  auto api = std::make_shared<RunloopApi>();
  api->calls = *calls;
  api->files = *files;
  api->devbox_id = o.devbox_id;
  api->api_key = o.api_key;
  api->executor = ex;
  return std::shared_ptr<Transport>(new RunloopTransport(std::move(ex), std::move(o), std::move(api)));
}

}  // namespace tether
