#include "tether/providers/e2b.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <vector>
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "host/native/e2b/e2b_channel.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "tether/shell_setup.h"
#include "protocol/sha256.h"

namespace tether {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr int kConnectAttempts = 3;                        // the control plane answered 5xx or was unreachable
constexpr std::chrono::milliseconds kConnectBackoff{200};  // doubled per attempt
constexpr std::size_t kSmallFileBytes = 64 * 1024;         // through the shell (umask 077), not /files
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one /files upload (a supervisor is a few MB)
constexpr int kTokenAttempts = 4;  // calls to envd, each with a token the control plane gave anew
constexpr int kScriptAttempts = 3;  // a setup script whose channel failed (cut, 5xx): they are idempotent
constexpr std::size_t kScriptPiece = 64 * 1024;  // stdin bytes per Write

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

std::string Basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// A multipart/form-data body with one field "file" (envd before 0.5.7).
std::string MultipartBody(std::string_view bytes, std::string_view filename, std::string* boundary) {
  std::random_device rd;
  do {
    *boundary = absl::StrCat("tether-", absl::Hex(rd(), absl::kZeroPad8), absl::Hex(rd(), absl::kZeroPad8),
                             absl::Hex(rd(), absl::kZeroPad8));
  } while (absl::StrContains(A(bytes), *boundary));
  std::string safe_name = absl::StrReplaceAll(A(filename), {{"\"", "_"}, {"\r", "_"}, {"\n", "_"}});
  return absl::StrCat("--", *boundary, "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"", safe_name,
                      "\"\r\nContent-Type: application/octet-stream\r\n\r\n", A(bytes), "\r\n--", *boundary, "--\r\n");
}

class E2bTransport final : public native::NativeTransport {
 public:
  E2bTransport(asio::any_io_executor ex, E2bOptions o)
      : NativeTransport(ex, {"e2b", o.sandbox_id, absl::StrCat("e2b sandbox ", o.sandbox_id)}, o.upload_progress),
        ex_(std::move(ex)),
        o_(std::move(o)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;   // base64 in JSON both ways
    c.streaming = true;
    c.costly_bytes = true;
    c.cut_prone = true;     // an HTTP response stream through E2B's proxies
    return c;
  }

  // envd refusing its access token (401: the sandbox was paused and
  // resumed, or the token rotated) asks the control plane for the token
  // again and tries again with it, while it gives a new one (a rotation
  // under a concurrent call), at most kTokenAttempts times; the same token
  // refused twice is the error.
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (argv.empty()) co_return absl::InvalidArgumentError("exec: empty argv");
    std::string refused;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<std::shared_ptr<const e2b::EnvdSession>> s = co_await Session();
      if (!s.ok()) co_return s.status();
      std::vector<std::string> args = argv;  // (named: g++ 12 and temporaries in coroutines)
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await e2b::StartProcess(*s, std::move(args));
      if (ch.ok() || !absl::IsUnauthenticated(ch.status())) co_return ch;
      if (attempt >= kTokenAttempts || (*s)->access_token == refused) co_return TokenRefused(ch.status());
      refused = (*s)->access_token;
      Forget(*s);
    }
  }

 protected:
  // Small files (markers, anything that may be private) go through the
  // shell with umask 077: never world-readable, even for a moment. Larger
  // ones through the file API into a temporary name beside `path`, then
  // sha256 checked and renamed into place by the shell. (Neither skips its
  // check for a file known to be missing.)
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool) override {
    if (bytes.size() <= kSmallFileBytes) co_return co_await PutByShell(std::move(path), bytes, mode, false);
    // (Named: g++ 12 destroys a temporary made inside a co_await twice.)
    const Uploader upload = [this](std::string tmp, std::string_view b) { return Upload(std::move(tmp), b); };
    co_return co_await PutByUpload(std::move(path), bytes, mode, false, 0, upload);
  }

  // Probe and PutFile's scripts. Unlike RunScriptOn it tells a cut stream
  // from EOF, and runs the script again then: every setup script is
  // idempotent (mkdir -p, a check, a copy to a temporary name then a
  // checked rename), and envd's streams are cut by design.
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) override {
    std::chrono::milliseconds backoff = kConnectBackoff;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<ScriptResult> r = co_await RunScriptOnce(script, input);
      if (r.ok() || r.status().code() != absl::StatusCode::kUnavailable || attempt >= kScriptAttempts) co_return r;
      asio::steady_timer t(co_await asio::this_coro::executor, backoff);
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      backoff *= 2;
    }
  }

 private:
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScriptOnce(const std::string& script, std::string_view input) {
    std::vector<std::string> argv = ShellArgv(script);  // (named: g++ 12 and temporaries in coroutines)
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    Channel& c = **ch;
    for (std::size_t off = 0; off < input.size(); off += kScriptPiece) {
      if (absl::Status st = co_await c.Write(input.substr(off, kScriptPiece)); !st.ok()) {
        c.Close();
        co_return absl::UnavailableError(absl::StrCat("e2b: sending to the sandbox failed: ", st.message()));
      }
      if (progress()) progress()(std::min(off + kScriptPiece, input.size()), input.size());
    }
    c.CloseWrite();
    ScriptResult r;
    char buf[4096];
    while (true) {
      absl::StatusOr<std::size_t> n = co_await c.ReadSome({buf, sizeof buf});
      if (!n.ok()) {
        c.Close();
        co_return absl::Status(n.status().code(), absl::StrCat("e2b: a setup command failed: ", n.status().message()));
      }
      if (*n == 0) break;
      r.out.append(buf, *n);
      if (r.out.size() > kMaxScriptOutput) {
        c.Close();
        co_return absl::DataLossError("the sandbox answered a setup command with more output than expected");
      }
    }
    r.diag = c.Diagnostics();
    r.exit_code = c.exit_code();
    c.Close();
    co_return r;
  }

  // POST /files?path=: the body raw (envd >= 0.5.7) or as multipart.
  asio::awaitable<absl::Status> Upload(std::string path, std::string_view bytes) {
    absl::StatusOr<std::shared_ptr<const e2b::EnvdSession>> s = co_await Session();
    if (!s.ok()) co_return s.status();
    net::Request r;
    r.method = "POST";
    r.target = absl::StrCat("/files?path=", net::UrlEncode(path));
    if ((*s)->version.AtLeast(0, 5, 7)) {
      r.headers = (*s)->HeadersFor("application/octet-stream");
      r.body = std::string(bytes);
    } else {
      std::string boundary;
      r.body = MultipartBody(bytes, Basename(path), &boundary);
      r.headers = (*s)->HeadersFor(absl::StrCat("multipart/form-data; boundary=", boundary));
    }
    // Connect-Protocol-Version is harmless on the plain HTTP file API.
    const std::string what = absl::StrCat("e2b: uploading ", path);
    absl::Status last;
    std::chrono::milliseconds backoff = kConnectBackoff;
    std::string refused;
    int token_attempts = 1;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<net::Response> resp = co_await (*s)->files->Call(r);
      if (resp.ok() && net::IsSuccess(*resp)) co_return absl::OkStatus();
      last = resp.ok() ? e2b::EnvdHttpError(*resp, what)
                       : absl::Status(resp.status().code(), absl::StrCat(what, ": ", resp.status().message()));
      if (absl::IsUnauthenticated(last)) {
        // A refused access token: a new one from the control plane, as Exec.
        if (token_attempts >= kTokenAttempts || (*s)->access_token == refused) co_return TokenRefused(last);
        ++token_attempts;
        refused = (*s)->access_token;
        Forget(*s);
        s = co_await Session();
        if (!s.ok()) co_return s.status();
        ReplaceToken(r.headers, (*s)->access_token);
        continue;
      }
      // The upload is idempotent (a temporary name): retry what is transient.
      if (last.code() != absl::StatusCode::kUnavailable || attempt >= kConnectAttempts) co_return last;
      asio::steady_timer t(co_await asio::this_coro::executor, backoff);
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      backoff *= 2;
    }
  }

  // The control plane's answer for this sandbox, asked once.
  asio::awaitable<absl::StatusOr<std::shared_ptr<const e2b::EnvdSession>>> Session() {
    if (session_) co_return session_;
    std::chrono::milliseconds backoff = kConnectBackoff;
    absl::StatusOr<std::shared_ptr<const e2b::EnvdSession>> s;
    for (int attempt = 1;; ++attempt) {
      s = co_await Resolve();
      if (s.ok() || s.status().code() != absl::StatusCode::kUnavailable || attempt >= kConnectAttempts) break;
      asio::steady_timer t(co_await asio::this_coro::executor, backoff);
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      backoff *= 2;
    }
    if (!s.ok()) co_return Scrub(s.status());
    if (!session_) session_ = *s;
    co_return session_;
  }

  asio::awaitable<absl::StatusOr<std::shared_ptr<const e2b::EnvdSession>>> Resolve() {
    const std::string what = absl::StrCat("e2b: connecting to sandbox ", o_.sandbox_id);
    if (!api_) {
      absl::StatusOr<net::Url> url = net::ParseUrl(o_.api_url);
      if (!url.ok()) co_return url.status();
      net::ClientOptions co;
      co.url = *url;
      co.tls.ca_file = o_.ca_file;
      absl::StatusOr<std::shared_ptr<net::Client>> c = net::Client::Make(ex_, std::move(co));
      if (!c.ok()) co_return c.status();
      api_ = *c;
    }
    net::Request r;
    r.method = "POST";
    r.target = absl::StrCat("/v2/sandboxes/", net::UrlEncode(o_.sandbox_id), "/connect");
    r.headers.emplace_back("X-API-KEY", o_.api_key);
    r.headers.emplace_back("Content-Type", "application/json");
    r.body = "{}";
    absl::StatusOr<net::Response> resp = co_await api_->Call(std::move(r));
    if (!resp.ok()) co_return absl::Status(resp.status().code(), absl::StrCat(what, ": ", resp.status().message()));
    if (!net::IsSuccess(*resp)) {
      absl::Status st = net::HttpError(*resp, absl::StrCat("POST /v2/sandboxes/", o_.sandbox_id, "/connect"));
      if (st.code() == absl::StatusCode::kNotFound) {
        co_return absl::NotFoundError(absl::StrCat("e2b: sandbox '", o_.sandbox_id, "' not found (", st.message(), ")"));
      }
      if (st.code() == absl::StatusCode::kUnauthenticated || st.code() == absl::StatusCode::kPermissionDenied) {
        co_return absl::Status(st.code(), absl::StrCat("e2b: the API key (E2B_API_KEY) was refused (", st.message(), ")"));
      }
      co_return absl::Status(st.code(), absl::StrCat("e2b: ", st.message()));
    }
    boost::system::error_code ec;
    json::value v = json::parse(resp->body, ec);
    if (ec || !v.is_object()) co_return absl::UnavailableError(absl::StrCat(what, ": the answer is not a JSON object"));
    const json::object& o = v.get_object();
    const auto str = [&](std::string_view k) -> std::string {
      const json::value* f = o.if_contains(k);
      return f != nullptr && f->is_string() ? std::string(f->get_string()) : std::string();
    };
    absl::StatusOr<e2b::EnvdVersion> version = e2b::ParseEnvdVersion(str("envdVersion"));
    if (!version.ok()) co_return absl::UnavailableError(absl::StrCat(what, ": ", version.status().message()));
    std::string sandbox_url = o_.sandbox_url;
    if (sandbox_url.empty()) {
      std::string domain = str("domain");
      if (domain.empty()) domain = native::Env("E2B_DOMAIN");
      if (domain.empty()) domain = "e2b.app";
      sandbox_url = absl::StrCat("https://", e2b::kEnvdPort, "-", o_.sandbox_id, ".", domain);
    }
    absl::StatusOr<net::Url> url = net::ParseUrl(sandbox_url);
    if (!url.ok()) co_return url.status();
    net::ClientOptions co;
    co.url = *url;
    co.tls.ca_file = o_.ca_file;
    absl::StatusOr<std::shared_ptr<net::Client>> client = net::Client::Make(ex_, co);
    if (!client.ok()) co_return client.status();
    co.request_timeout = kUploadTimeout;
    absl::StatusOr<std::shared_ptr<net::Client>> files = net::Client::Make(ex_, co);
    if (!files.ok()) co_return files.status();
    auto s = std::make_shared<e2b::EnvdSession>();
    s->client = *client;
    s->files = *files;
    s->sandbox_id = o_.sandbox_id;
    s->access_token = str("envdAccessToken");
    s->version = *version;
    co_return std::shared_ptr<const e2b::EnvdSession>(std::move(s));
  }

  // The session whose access token envd refused is asked for again (unless
  // another caller already replaced it).
  void Forget(const std::shared_ptr<const e2b::EnvdSession>& s) {
    if (session_ == s) session_.reset();
  }

  static void ReplaceToken(net::Headers& h, const std::string& token) {
    std::erase_if(h, [](const auto& kv) { return kv.first == "X-Access-Token"; });
    if (!token.empty()) h.emplace_back("X-Access-Token", token);
  }

  static absl::Status TokenRefused(const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("e2b: envd refused its access token, also as the control plane "
                                                "gave it again (", st.message(), ")"));
  }

  // A server that echoes the key back must not put it in our message.
  absl::Status Scrub(const absl::Status& st) const {
    if (o_.api_key.empty() || !absl::StrContains(st.message(), o_.api_key)) return st;
    return absl::Status(st.code(), absl::StrReplaceAll(st.message(), {{o_.api_key, "<E2B_API_KEY>"}}));
  }

  asio::any_io_executor ex_;
  E2bOptions o_;
  std::shared_ptr<net::Client> api_;
  std::shared_ptr<const e2b::EnvdSession> session_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeE2bTransport(asio::any_io_executor ex, E2bOptions o) {
  if (absl::Status st = native::CheckId("e2b", "sandbox id", "--sandbox ID", o.sandbox_id); !st.ok()) return st;
  if (absl::Status st = native::ApiKeyOrEnv("e2b", "E2B_API_KEY", o.api_key); !st.ok()) return st;
  if (o.api_url.empty()) o.api_url = native::Env("E2B_API_URL");
  if (o.api_url.empty()) {
    std::string domain = native::Env("E2B_DOMAIN");
    o.api_url = absl::StrCat("https://api.", domain.empty() ? "e2b.app" : domain);
  }
  if (o.sandbox_url.empty()) o.sandbox_url = native::Env("E2B_SANDBOX_URL");
  if (absl::StatusOr<net::Url> u = net::ParseUrl(o.api_url); !u.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("e2b: the API URL: ", u.status().message()));
  }
  if (!o.sandbox_url.empty()) {
    if (absl::StatusOr<net::Url> u = net::ParseUrl(o.sandbox_url); !u.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("e2b: the sandbox URL: ", u.status().message()));
    }
  }
  return std::shared_ptr<Transport>(new E2bTransport(std::move(ex), std::move(o)));
}

}  // namespace tether
