#include "tether/providers/daytona.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/support/random.h"
#include "host/native/daytona/daytona_api.h"
#include "host/native/daytona/daytona_channel.h"
#include "host/native/daytona/daytona_v2.h"
#include "host/native/daytona/daytona_v2_channel.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDefaultApiUrl = "https://app.daytona.io/api";  // the SDK's default
constexpr int kExecAttempts = 3;                          // session + exec whose call failed transiently
constexpr int kExecChecks = 3;                            // an exec lost, found not to have run, sent again
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one bulk upload

using daytona::DaytonaApi;
using daytona::DeleteSession;
using daytona::kCallAttempts;
using daytona::kCallBackoff;

class DaytonaTransport final : public native::NativeTransport {
 public:
  DaytonaTransport(asio::any_io_executor ex, DaytonaOptions o, std::shared_ptr<DaytonaApi> api)
      : NativeTransport(ex, {"daytona", o.sandbox_id, absl::StrCat("daytona sandbox ", o.sandbox_id)},
                        o.upload_progress),
        ex_(std::move(ex)),
        o_(std::move(o)),
        api_(std::move(api)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    // Input is a JSON string either way (armored text); v1's log drops NUL,
    // adds newlines and demuxes on marker bytes, v2's is exact but the
    // input still is not: the text tunnel.
    c.exact_bytes = false;
    c.stdin_eof = !v2_prefix_.empty();  // v1: an async session command never sees EOF
    c.streaming = true;                 // the log streams while the command runs
    c.costly_bytes = true;
    c.cut_prone = true;                 // an HTTP stream or a WebSocket through proxies
    return c;
  }

  // Which process API the toolbox serves, asked once: GET on v2's list
  // (under each prefix seen, daytona_v2.h) answering 200 is v2; 404 from
  // both is an older daemon, which has the session API only. Other
  // failures are this call's (nothing is guessed).
  asio::awaitable<absl::Status> Prepare() override {
    if (probed_) co_return absl::OkStatus();
    if (absl::Status st = co_await EnsureToolbox(); !st.ok()) co_return st;
    if (o_.process_api == "v1") {
      probed_ = true;
      co_return absl::OkStatus();
    }
    for (std::string_view prefix : daytona::v2::kPrefixes) {
      absl::StatusOr<net::Response> r = co_await api_->Call(api_->toolbox, "GET", std::string(prefix), "");
      if (r.ok()) {
        v2_prefix_ = std::string(prefix);
        break;
      }
      if (r.status().code() != absl::StatusCode::kNotFound) co_return r.status();
    }
    if (v2_prefix_.empty() && o_.process_api == "v2") {
      co_return absl::UnimplementedError(
          "daytona: the sandbox's daemon does not serve the process API v2 (404 under /processes and "
          "/process/v2/processes): drop --process-api v2, or upgrade the sandbox's daemon");
    }
    probed_ = true;
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (absl::Status st = co_await Prepare(); !st.ok()) co_return st;
    if (!v2_prefix_.empty()) co_return co_await ExecV2(std::move(argv));
    absl::StatusOr<std::string> line = daytona::CommandLine(argv);
    if (!line.ok()) co_return line.status();
    absl::StatusOr<std::string> exec_body = daytona::ExecRequestJson(*line);
    if (!exec_body.ok()) co_return exec_body.status();
    if (absl::Status st = co_await EnsureToolbox(); !st.ok()) co_return st;
    absl::Status last;
    for (int attempt = 1; attempt <= kExecAttempts; ++attempt) {
      const std::string sid = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(8)));
      absl::Status made = co_await MakeSession(sid);
      if (!made.ok()) {
        last = made;
        if (ErrorCodeOf(made) == ErrorCode::kOutcomeUnknown) {
          asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);  // (nothing ran in it)
          continue;
        }
        if (last.code() == absl::StatusCode::kUnavailable) continue;
        co_return last;
      }
      absl::StatusOr<std::string> cid = co_await StartCommand(sid, *exec_body);
      if (!cid.ok()) {
        asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);
        last = api_->Clean(cid.status());
        // (OUTCOME_UNKNOWN: the command may have started: deleting the
        // session kills it, and it is not started again.)
        if (last.code() == absl::StatusCode::kUnavailable && ErrorCodeOf(last) == ErrorCode::kUnavailable) continue;
        co_return last;
      }
      absl::StatusOr<std::unique_ptr<net::WebSocket>> ws = co_await api_->toolbox->OpenWebSocket(
          absl::StrCat(api_->CommandPath(sid, *cid), "/logs?follow=true"), api_->Headers(""), {});
      if (!ws.ok() && ws.status().code() != absl::StatusCode::kUnavailable) {
        asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);
        co_return api_->Clean(absl::Status(ws.status().code(),
                                           absl::StrCat("daytona: the command's log stream: ", ws.status().message())));
      }
      // A stream that failed transiently is opened again by the first read.
      co_return daytona::MakeDaytonaChannel(ex_, api_, sid, *cid,
                                            ws.ok() ? *std::move(ws) : std::unique_ptr<net::WebSocket>());
    }
    co_return last;
  }

 protected:
  // The bulk upload into a temporary name beside `path`, then one command
  // checks its sha256, chmods it and renames it into place.
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) override {
    // (Named: g++ 12 destroys a temporary made inside a co_await twice.)
    const Uploader upload = [this, path](std::string tmp, std::string_view b) {
      return Upload(path, std::move(tmp), b);
    };
    co_return co_await PutByUpload(path, bytes, mode, known_missing, daytona::kMaxFileBytes, upload);
  }

 private:
  // POST /process/session with our own random id. Its answer lost (5xx), it
  // is sent again: the id is ours, so a 409 (the id exists) then means the
  // lost attempt made it. OUTCOME_UNKNOWN when every answer was lost.
  asio::awaitable<absl::Status> MakeSession(const std::string& sid) {
    bool maybe_made = false;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<net::Response> made =
          co_await api_->CallOnce(api_->toolbox, "POST", "/process/session", daytona::SessionRequestJson(sid));
      if (made.ok()) co_return absl::OkStatus();
      if (maybe_made && absl::StrContains(made.status().message(), "HTTP 409")) co_return absl::OkStatus();
      if (ErrorCodeOf(made.status()) != ErrorCode::kOutcomeUnknown || attempt >= kCallAttempts) {
        co_return made.status();
      }
      maybe_made = true;
      asio::steady_timer t(co_await asio::this_coro::executor, kCallBackoff * (1 << (attempt - 1)));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // POST .../exec into our fresh session; the command's id. Its answer lost
  // (5xx), the session's command list (the SDK's getSession) tells whether
  // it started: one command is ours, none means it did not start (sent
  // again, at most kExecChecks times). OUTCOME_UNKNOWN when the list cannot
  // be read (the caller deletes the session, which ends what may run).
  asio::awaitable<absl::StatusOr<std::string>> StartCommand(const std::string& sid, const std::string& exec_body) {
    for (int check = 1;; ++check) {
      absl::StatusOr<net::Response> ex =
          co_await api_->CallOnce(api_->toolbox, "POST", absl::StrCat(api_->SessionPath(sid), "/exec"), exec_body);
      if (ex.ok()) co_return daytona::ParseExecAnswer(ex->body);
      if (ErrorCodeOf(ex.status()) != ErrorCode::kOutcomeUnknown) co_return ex.status();
      absl::StatusOr<net::Response> listed = co_await api_->Call(api_->toolbox, "GET", api_->SessionPath(sid), "");
      absl::StatusOr<std::vector<std::string>> ids =
          listed.ok() ? daytona::ParseSessionCommands(listed->body) : listed.status();
      if (!ids.ok()) {
        co_return OutcomeUnknownError(absl::StrCat(ex.status().message(), "; whether it started cannot be told (",
                                                   ids.status().message(), "): it is not started again"));
      }
      if (ids->size() == 1) co_return ids->front();
      if (!ids->empty()) {
        co_return OutcomeUnknownError(absl::StrCat(ex.status().message(), "; its session holds ", ids->size(),
                                                   " commands, not one: it is not started again"));
      }
      if (check >= kExecChecks) co_return ex.status();
    }
  }

  // v2: one exec process named by us (tether-<random>), so that a creation
  // whose answer was lost (5xx) can be looked up by that name: found, it is
  // ours; not found, it did not happen and is sent again (at most
  // kExecChecks times); the list unreadable, OUTCOME_UNKNOWN (and nothing
  // is sent again).
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> ExecV2(std::vector<std::string> argv) {
    const std::string name = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(8)));
    absl::StatusOr<std::string> body = daytona::v2::CreateProcessJson(argv, name);
    if (!body.ok()) co_return body.status();
    for (int check = 1;; ++check) {
      absl::StatusOr<net::Response> made = co_await api_->CallOnce(api_->toolbox, "POST", v2_prefix_, *body);
      absl::StatusOr<daytona::v2::ProcessView> p = absl::UnknownError("");
      if (made.ok()) {
        p = daytona::v2::ParseProcess(made->body);
      } else {
        if (ErrorCodeOf(made.status()) != ErrorCode::kOutcomeUnknown) co_return made.status();
        absl::StatusOr<net::Response> listed = co_await api_->Call(
            api_->toolbox, "GET", absl::StrCat(v2_prefix_, "?name=", net::UrlEncode(name)), "");
        absl::StatusOr<std::vector<daytona::v2::ProcessView>> found =
            listed.ok() ? daytona::v2::ParseProcessList(listed->body) : listed.status();
        if (!found.ok()) {
          co_return OutcomeUnknownError(absl::StrCat(made.status().message(), "; whether it started cannot be told (",
                                                     found.status().message(), "): it is not started again"));
        }
        std::erase_if(*found, [&](const daytona::v2::ProcessView& v) { return v.name != name; });
        if (found->empty()) {
          if (check >= kExecChecks) co_return made.status();
          continue;
        }
        p = found->front();
      }
      if (!p.ok()) co_return api_->Clean(p.status());
      co_return daytona::MakeDaytonaV2Channel(ex_, api_, v2_prefix_, p->id);
    }
  }

  // Finds the toolbox as the SDK does: the sandbox's toolboxProxyUrl, else
  // the API's /toolbox-proxy-url answer.
  asio::awaitable<absl::Status> EnsureToolbox() {
    if (api_->toolbox) co_return absl::OkStatus();
    const std::string id = net::UrlEncode(o_.sandbox_id);
    absl::StatusOr<net::Response> r = co_await api_->Call(api_->api, "GET", absl::StrCat("/sandbox/", id), "");
    if (!r.ok()) co_return NotFoundSays(r.status());
    absl::StatusOr<daytona::SandboxView> view = daytona::ParseSandbox(r->body);
    if (!view.ok()) co_return api_->Clean(view.status());
    if (!view->state.empty() && view->state != "started") {
      co_return absl::FailedPreconditionError(absl::StrCat("daytona: sandbox '", o_.sandbox_id, "' is ",
                                                           view->state, ", not started: start it first"));
    }
    std::string proxy = view->toolbox_proxy_url;
    if (proxy.empty()) {
      absl::StatusOr<net::Response> p =
          co_await api_->Call(api_->api, "GET", absl::StrCat("/sandbox/", id, "/toolbox-proxy-url"), "");
      if (!p.ok()) co_return NotFoundSays(p.status());
      absl::StatusOr<std::string> url = daytona::ParseProxyUrl(p->body);
      if (!url.ok()) co_return api_->Clean(url.status());
      proxy = *url;
    }
    if (api_->toolbox) co_return absl::OkStatus();  // another call got there first
    absl::StatusOr<net::Url> url = net::ParseUrl(daytona::ToolboxBase(proxy, o_.sandbox_id));
    if (!url.ok() || (url->scheme != "https" && url->scheme != "http")) {
      co_return absl::UnavailableError(absl::StrCat(
          "daytona: the toolbox URL the API gave is not usable: ",
          url.ok() ? absl::StrCat("scheme ", url->scheme) : std::string(url.status().message())));
    }
    net::ClientOptions co;
    co.url = *url;
    co.tls.ca_file = o_.ca_file;
    co.max_body = daytona::kMaxAnswerBytes;
    co.max_message = 16u << 20;
    absl::StatusOr<std::shared_ptr<net::Client>> toolbox = net::Client::Make(ex_, co);
    if (!toolbox.ok()) co_return toolbox.status();
    co.request_timeout = kUploadTimeout;
    absl::StatusOr<std::shared_ptr<net::Client>> upload = net::Client::Make(ex_, co);
    if (!upload.ok()) co_return upload.status();
    api_->toolbox = *toolbox;
    api_->upload = *upload;
    co_return absl::OkStatus();
  }

  absl::Status NotFoundSays(const absl::Status& st) const {
    if (st.code() != absl::StatusCode::kNotFound) return st;
    return absl::NotFoundError(absl::StrCat("daytona: sandbox '", o_.sandbox_id, "' not found (", st.message(), ")"));
  }

  // POST /files/bulk-upload of `bytes` at `tmp` (`path` names it in messages).
  asio::awaitable<absl::Status> Upload(std::string path, std::string tmp, std::string_view bytes) {
    if (absl::Status st = co_await EnsureToolbox(); !st.ok()) co_return st;
    std::string boundary;
    do {
      boundary = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(16)));
    } while (bytes.find(boundary) != std::string_view::npos);
    absl::StatusOr<net::Response> r =
        co_await api_->Call(api_->upload, "POST", "/files/bulk-upload", daytona::BulkUploadBody(tmp, bytes, boundary),
                            absl::StrCat("multipart/form-data; boundary=", boundary));
    if (!r.ok()) {
      co_return absl::Status(r.status().code(), absl::StrCat("uploading ", path, ": ", r.status().message()));
    }
    co_return absl::OkStatus();
  }

  asio::any_io_executor ex_;
  DaytonaOptions o_;
  std::shared_ptr<DaytonaApi> api_;
  bool probed_ = false;
  std::string v2_prefix_;  // the process API v2's prefix; empty: the session API (v1)
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeDaytonaTransport(asio::any_io_executor ex, DaytonaOptions o) {
  if (absl::Status st = native::CheckId("daytona", "sandbox id", "--sandbox ID", o.sandbox_id, ".");
      !st.ok()) {
    return st;
  }
  bool jwt = false;
  if (o.api_key.empty()) o.api_key = native::Env("DAYTONA_API_KEY");
  if (o.api_key.empty()) {
    o.api_key = native::Env("DAYTONA_JWT_TOKEN");
    jwt = !o.api_key.empty();
  }
  if (o.api_key.empty()) {
    return absl::UnauthenticatedError(
        "daytona: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID)");
  }
  if (!native::HeaderSafe(o.api_key)) {
    return absl::InvalidArgumentError("daytona: the API key contains a space or a control character");
  }
  if (o.organization_id.empty() && jwt) o.organization_id = native::Env("DAYTONA_ORGANIZATION_ID");
  if (jwt && o.organization_id.empty()) {
    return absl::UnauthenticatedError("daytona: DAYTONA_ORGANIZATION_ID is required with DAYTONA_JWT_TOKEN");
  }
  if (!native::HeaderSafe(o.organization_id)) {
    return absl::InvalidArgumentError("daytona: the organization id contains a space or a control character");
  }
  if (o.process_api.empty()) o.process_api = "auto";
  if (o.process_api != "auto" && o.process_api != "v1" && o.process_api != "v2") {
    return absl::InvalidArgumentError(
        absl::StrCat("daytona: --process-api must be auto, v1 or v2, not '", o.process_api.substr(0, 32), "'"));
  }
  if (o.api_url.empty()) o.api_url = native::Env("DAYTONA_API_URL");
  if (o.api_url.empty()) o.api_url = native::Env("DAYTONA_SERVER_URL");
  if (o.api_url.empty()) o.api_url = std::string(kDefaultApiUrl);
  absl::StatusOr<net::ClientOptions> api_options = native::ApiClientOptions("daytona", o.api_url, o.ca_file);
  if (!api_options.ok()) return api_options.status();
  net::ClientOptions co = *std::move(api_options);
  co.max_body = daytona::kMaxAnswerBytes;
  absl::StatusOr<std::shared_ptr<net::Client>> api_client = net::Client::Make(ex, co);
  if (!api_client.ok()) return api_client.status();
  auto api = std::make_shared<DaytonaApi>();
  api->api = *api_client;
  api->sandbox_id = o.sandbox_id;
  api->key = o.api_key;
  api->org_id = jwt ? o.organization_id : std::string();
  api->ca_file = o.ca_file;
  return std::shared_ptr<Transport>(new DaytonaTransport(std::move(ex), std::move(o), std::move(api)));
}

}  // namespace tether
