#include "tether/providers/docker.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/codec/tar.h"
#include "host/native/docker/docker_channel.h"
#include "host/native/native_transport.h"
#include "tether/errors.h"
#include "host/support/random.h"
#include "host/net/http.h"
#include "tether/shell_setup.h"
#include "protocol/command_line.h"
#include "protocol/sha256.h"

namespace tether {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

using docker::Engine;
using docker::ProtocolError;

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kUploadPiece = 64 * 1024;  // one chunk of an archive upload
constexpr std::size_t kMaxCertBytes = 1 << 20;  // a PEM file from DOCKER_CERT_PATH
// How long an Exec waits for abandoned commands to be ended first.
constexpr std::chrono::milliseconds kReapWait{3000};

// The sandbox's sha256sum, from coreutils or busybox (as shell_setup.cc).
constexpr char kSha256[] =
    "if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; else S='busybox sha256sum'; fi; ";

// The engine's own message from an error body ({"message": ...}), else
// the body's first printable bytes.
std::string EngineMessage(const net::Response& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* m = v.as_object().if_contains("message"); m != nullptr && m->is_string()) {
      return PrintableMessage(std::string(m->as_string().subview()), 512);
    }
  }
  std::string s;
  for (char c : r.body.substr(0, 200)) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) s.push_back(c);
  }
  return s;
}

// A failure to get any answer from the engine.
absl::Status Unreachable(const Engine& e, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("docker: cannot reach the engine at ", e.where, ": ", st.message()));
}

// An error answer to a call about the container: not found and not running
// get their own codes; the rest as net::HttpError.
absl::Status ContainerError(const Engine& e, const net::Response& r, std::string_view what) {
  const std::string msg = EngineMessage(r);
  if (r.status == 404) {
    return absl::NotFoundError(
        absl::StrCat("docker: no such container '", e.container, "' at ", e.where, " (engine: ", msg, ")"));
  }
  // Docker answers 409 "Container X is not running"; podman 500 "container
  // state improper".
  if (r.status == 409 || (r.status == 500 && (absl::StrContains(msg, "state improper") ||
                                              absl::StrContains(msg, "not running")))) {
    return absl::FailedPreconditionError(
        absl::StrCat("docker: container '", e.container, "' is not running: ", msg));
  }
  return net::HttpError(r, absl::StrCat("docker: ", std::string(what), " in container '", e.container, "'"));
}

net::Request JsonRequest(std::string method, std::string target, const json::value& body) {
  net::Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = json::serialize(body);
  return r;
}

class DockerTransport final : public native::NativeTransport {
 public:
  DockerTransport(asio::any_io_executor ex, std::shared_ptr<const Engine> engine, native::Progress progress)
      : NativeTransport(ex,
                        {"docker", absl::StrCat("docker:", engine->container),
                         absl::StrCat("docker container ", engine->container)},
                        std::move(progress)),
        ex_(std::move(ex)),
        engine_(std::move(engine)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;
    c.stdin_eof = false;  // a half-close is not reliably passed on
    c.streaming = true;
    c.direct_connect = false;
    c.costly_bytes = true;
    c.cut_prone = true;  // an HTTP connection: it can be cut while both ends live
    return c;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    // A command abandoned just before (a cut attachment's bridge) is ended
    // first, so that its successor does not find the process still held.
    asio::steady_timer wait(ex_);
    for (auto until = std::chrono::steady_clock::now() + kReapWait;
         reaping_ > 0 && std::chrono::steady_clock::now() < until;) {
      wait.expires_after(std::chrono::milliseconds(20));
      auto [ec] = co_await wait.async_wait(kNoThrow);
      if (ec) co_return absl::CancelledError("docker: exec cancelled");
    }
    co_return co_await ExecNow(std::move(argv));
  }

 private:
  // `reap`: end the command if its channel is abandoned (not for Reap's own).
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> ExecNow(std::vector<std::string> argv,
                                                                    bool reap = true) {
    if (argv.empty()) co_return absl::InvalidArgumentError("docker: exec: empty argv");
    json::object create;
    create["AttachStdin"] = true;
    create["AttachStdout"] = true;
    create["AttachStderr"] = true;
    create["Tty"] = false;
    // A tag of its own, by which Reap finds it if its channel is abandoned.
    std::string tag;  // "TETHER_EXEC_TAG=HEX"
    if (reap) {
      tag = protocol::ExecTagEntry(absl::BytesToHexString(internal::RandomBytes(16)));
      json::array env;
      env.emplace_back(tag);
      create["Env"] = std::move(env);
    }
    json::array cmd;
    for (const std::string& a : argv) cmd.emplace_back(a);
    create["Cmd"] = std::move(cmd);
    absl::StatusOr<net::Response> r = co_await engine_->client->Call(JsonRequest(
        "POST", absl::StrCat(engine_->api, "/containers/", net::UrlEncode(engine_->container), "/exec"), create));
    if (!r.ok()) co_return Unreachable(*engine_, r.status());
    if (!net::IsSuccess(*r)) co_return ContainerError(*engine_, *r, "creating an exec");
    boost::system::error_code ec;
    json::value v = json::parse(r->body, ec);
    const json::value* id = (!ec && v.is_object()) ? v.as_object().if_contains("Id") : nullptr;
    if (id == nullptr || !id->is_string() || id->as_string().empty()) {
      co_return ProtocolError("docker: the engine created an exec but gave no Id");
    }
    const std::string exec_id(id->as_string());

    json::object start;
    start["Detach"] = false;
    start["Tty"] = false;
    absl::StatusOr<std::unique_ptr<net::RawStream>> raw = co_await engine_->client->Upgrade(
        JsonRequest("POST", absl::StrCat(engine_->api, "/exec/", net::UrlEncode(exec_id), "/start"), start), "tcp");
    if (!raw.ok()) {
      const absl::Status& st = raw.status();
      if (absl::IsNotFound(st)) {
        co_return absl::NotFoundError(
            absl::StrCat("docker: starting an exec in container '", engine_->container, "': ", st.message()));
      }
      if (absl::IsFailedPrecondition(st) || absl::StrContains(st.message(), "state improper")) {
        co_return absl::FailedPreconditionError(
            absl::StrCat("docker: container '", engine_->container, "' is not running: ", st.message()));
      }
      co_return absl::Status(st.code(), absl::StrCat("docker: starting an exec in container '", engine_->container,
                                                     "' at ", engine_->where, ": ", st.message()));
    }
    std::function<void()> on_abandon;
    if (reap) {
      std::weak_ptr<Transport> weak = weak_from_this();
      on_abandon = [weak, tag = std::move(tag)]() mutable {
        if (std::shared_ptr<Transport> t = weak.lock()) static_cast<DockerTransport&>(*t).Abandoned(std::move(tag));
      };
    }
    co_return docker::MakeExecChannel(ex_, engine_, exec_id, *std::move(raw), std::move(on_abandon));
  }

  // The Engine API cannot kill an exec. An abandoned one is found inside the
  // container as a process the engine started (parent pid 0 in the
  // container's namespace, not pid 1) whose environment holds its exec tag,
  // and killed: what closing a local channel does to its bridge. (Not by its
  // command line: the supervisor zeroes its own past the verb, and two
  // bridges' lines can be the same. The daemon is never such a process: it
  // has a parent.)
  void Abandoned(std::string tag) {
    ++reaping_;
    asio::co_spawn(ex_, Reap(std::static_pointer_cast<DockerTransport>(shared_from_this()), std::move(tag)),
                   asio::detached);
  }

  static asio::awaitable<void> Reap(std::shared_ptr<DockerTransport> self, std::string tag) {  // tag: the exec tag entry
    const std::string script = absl::StrCat(
        "t=", tag, "; for d in /proc/[0-9]*; do p=${d#/proc/}; ",
        "if [ \"$p\" = 1 ] || [ \"$p\" = $$ ]; then continue; fi; pp=; ",
        "while read -r k v; do if [ \"$k\" = PPid: ]; then pp=$v; break; fi; done 2>/dev/null < \"$d/status\"; ",
        "[ \"$pp\" = 0 ] || continue; ",
        "if tr '\\0' '\\n' < \"$d/environ\" 2>/dev/null | grep -qx \"$t\"; then kill -9 \"$p\" 2>/dev/null; fi; ",
        "done; echo tether-reaped");
    std::vector<std::string> sh;  // (named: g++ 12 and braced lists in coroutines)
    sh.push_back("/bin/sh");
    sh.push_back("-c");
    sh.push_back(script);
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await self->ExecNow(std::move(sh), false);
    if (ch.ok()) (void)co_await RunScriptOn(**ch, std::string_view(), {});
    --self->reaping_;
  }

 protected:
  // A tar through the archive API (no known_missing shortcut: the check
  // also learns the numeric user the file must belong to).
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool) override {
    const std::string hash = protocol::Sha256Hex(bytes);
    const std::string key = absl::StrCat(path, "\n", hash);
    if (installed().count(key)) co_return absl::OkStatus();
    const std::size_t slash = path.rfind('/');
    if (path.empty() || path[0] != '/' || slash == std::string::npos || slash + 1 == path.size() ||
        path.size() > kMaxSandboxPath) {
      co_return absl::InvalidArgumentError(absl::StrCat("docker: put file: '", path, "' is not an absolute file path"));
    }
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    const std::string q = ShellQuote(path);

    // Already there with this content: nothing to send. Else the numeric
    // user the exec runs as, who must own the file the engine unpacks.
    // The same call sweeps the directory of temporary files (below) whose
    // upload stopped more than 10 minutes ago: a host killed mid-upload, or
    // an engine that wrote after the cleanup gave up waiting.
    absl::StatusOr<ScriptResult> have = co_await runner()(
        absl::StrCat(kSha256, "find ", ShellQuote(dir), " -maxdepth 1 -type f -name '.tether-up-*' -mmin +10 ",
                     "-exec rm -f {} + 2>/dev/null; ",
                     "f=", q, "; if [ -f \"$f\" ] && [ ! -L \"$f\" ] && ",
                     "[ \"$($S < \"$f\" | cut -c1-64)\" = ", hash, " ]; then echo tether-have; ",
                     "else echo \"tether-need $(id -u) $(id -g)\"; fi"),
        std::string_view());
    if (!have.ok()) co_return have.status();
    if (absl::StrContains(have->out, "tether-have")) {
      installed().insert(key);
      co_return absl::OkStatus();
    }
    unsigned uid = 0, gid = 0;
    const std::size_t need = have->out.find("tether-need ");
    if (need == std::string::npos ||
        std::sscanf(have->out.c_str() + need, "tether-need %u %u", &uid, &gid) != 2) {
      co_return absl::UnavailableError(
          absl::StrCat("docker: checking ", path, " in container '", engine_->container, "' failed: ",
                       absl::CHexEscape(have->out.substr(0, 256)), have->diag.empty() ? "" : " (stderr: ",
                       have->diag, have->diag.empty() ? "" : ")"));
    }

    // A temporary name beside the file: the engine never writes the path.
    const std::string tmp_name = absl::StrCat(".tether-up-", absl::BytesToHexString(internal::RandomBytes(8)));
    const std::string tmp = dir == "/" ? "/" + tmp_name : absl::StrCat(dir, "/", tmp_name);
    absl::StatusOr<std::string> tar =
        codec::TarOneFile({.name = tmp_name, .mode = mode & 07777, .uid = uid, .gid = gid}, bytes);
    if (!tar.ok()) co_return tar.status();
    bool answered = false;
    if (absl::Status st = co_await Upload(dir, *tar, bytes.size(), answered); !st.ok()) {
      // An answer means the engine is done with the archive: remove what
      // it may have left. An upload cut short may have left part of the
      // file, or may yet: the engine unpacks in a process of its own that
      // can still be starting when the client sees the cut (podman's
      // copier, under load), and creates the file once, from the tar's
      // first header. So: remove it if it is there; if not, wait up to 3 s
      // for it to appear and remove it then. (A later write still is swept
      // by the next install.)
      // (Named, and no conditional operator in the co_await: g++ 12
      // destroys such a temporary twice.)
      std::string cleanup = absl::StrCat("rm -f ", ShellQuote(tmp));
      if (!answered) {
        cleanup = absl::StrCat("t=", ShellQuote(tmp), "; i=0; while :; do ",
                               "if [ -e \"$t\" ] || [ -L \"$t\" ]; then rm -f \"$t\"; break; fi; ",
                               "[ $i -ge 30 ] && break; ",
                               "if sleep 0.1 2>/dev/null; then i=$((i+1)); else sleep 1; i=$((i+10)); fi; done");
      }
      (void)co_await runner()(cleanup, std::string_view());
      co_return st;
    }

    // Checked, given its mode and renamed into place; a temporary file the
    // engine did not give to the exec's user is copied to one it owns.
    absl::StatusOr<ScriptResult> put = co_await runner()(
        absl::StrCat(kSha256, "umask 077; f=", q, "; t=", ShellQuote(tmp), "; h=; ",
                     "if [ -f \"$t\" ] && [ ! -L \"$t\" ] && ",
                     "{ [ -O \"$t\" ] || { cp \"$t\" \"$t.own\" && rm -f \"$t\" && mv -f \"$t.own\" \"$t\"; }; } && ",
                     "h=$($S < \"$t\" | cut -c1-64) && [ \"$h\" = ", hash, " ] && chmod ", OctalMode(mode),
                     " \"$t\" && mv -f \"$t\" \"$f\"; then echo tether-put-ok; ",
                     "else rm -f \"$t\" \"$t.own\"; echo \"tether-put-bad $h\"; fi"),
        std::string_view());
    if (!put.ok()) {
      (void)co_await runner()(absl::StrCat("rm -f ", ShellQuote(tmp)), std::string_view());
      co_return put.status();
    }
    if (!absl::StrContains(put->out, "tether-put-ok")) {
      co_return absl::DataLossError(absl::StrCat("docker: installing ", path, " (", bytes.size(), " bytes, sha256 ",
                                                 hash, ") failed: the container said: ",
                                                 absl::CHexEscape(put->out.substr(0, 256))));
    }
    installed().insert(key);
    co_return absl::OkStatus();
  }

 private:
  static std::string OctalMode(int mode) {
    return absl::StrCat(absl::Dec(mode >> 9 & 7), absl::Dec(mode >> 6 & 7), absl::Dec(mode >> 3 & 7),
                        absl::Dec(mode & 7));
  }

  // PUT /containers/{id}/archive?path=DIR, the tar sent in pieces so that
  // progress can be reported. `answered`: the engine answered (and so has
  // finished with the archive), whatever it said.
  asio::awaitable<absl::Status> Upload(const std::string& dir, const std::string& tar, std::size_t file_bytes,
                                       bool& answered) {
    net::Request req;
    req.method = "PUT";
    req.target = absl::StrCat(engine_->api, "/containers/", net::UrlEncode(engine_->container),
                              "/archive?path=", net::UrlEncode(dir));
    req.headers.emplace_back("Content-Type", "application/x-tar");
    absl::StatusOr<std::unique_ptr<net::BodyWriter>> w = co_await engine_->client->Begin(std::move(req));
    if (!w.ok()) co_return Unreachable(*engine_, w.status());
    for (std::size_t off = 0; off < tar.size(); off += kUploadPiece) {
      const std::string_view piece = std::string_view(tar).substr(off, kUploadPiece);
      if (absl::Status st = co_await (*w)->Write(piece); !st.ok()) {
        (*w)->Close();
        co_return absl::Status(st.code(), absl::StrCat("docker: uploading to ", dir, ": ", st.message()));
      }
      if (progress()) progress()(std::min(off + kUploadPiece, file_bytes), file_bytes);
    }
    absl::StatusOr<std::unique_ptr<net::BodyStream>> resp = co_await (*w)->Finish();
    if (!resp.ok()) {
      co_return absl::Status(resp.status().code(),
                             absl::StrCat("docker: uploading to ", dir, ": ", resp.status().message()));
    }
    answered = true;
    net::Response head = (*resp)->head();
    // The answer's body (an error message) is small; read a bounded amount.
    char buf[4096];
    while (head.body.size() < 16 * 1024) {
      absl::StatusOr<std::size_t> n = co_await (*resp)->ReadSome({buf, sizeof buf});
      if (!n.ok() || *n == 0) break;
      head.body.append(buf, *n);
    }
    (*resp)->Close();
    if (net::IsSuccess(head)) co_return absl::OkStatus();
    if (head.status == 404) {
      co_return absl::NotFoundError(absl::StrCat("docker: uploading to ", dir, " in container '", engine_->container,
                                                 "': ", EngineMessage(head)));
    }
    co_return ContainerError(*engine_, head, absl::StrCat("uploading to ", dir));
  }

  asio::any_io_executor ex_;
  std::shared_ptr<const Engine> engine_;
  int reaping_ = 0;  // abandoned commands being ended (Reap)
};

absl::StatusOr<std::string> ReadPem(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("docker: cannot read ", file));
  std::string s;
  s.resize(kMaxCertBytes + 1);
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(in.gcount()));
  if (s.size() > kMaxCertBytes) return absl::InvalidArgumentError(absl::StrCat("docker: ", file, " is too large"));
  return s;
}

bool Exists(const std::string& file) { return std::ifstream(file).good(); }

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeDockerTransport(asio::any_io_executor ex, DockerOptions o) {
  if (o.container.empty()) return absl::InvalidArgumentError("docker: no container named (--container ID)");
  if (!o.api_version.empty() &&
      (o.api_version.size() < 3 || o.api_version.substr(0, 2) != "/v" ||
       o.api_version.find_first_not_of("0123456789.", 2) != std::string::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("docker: api_version is \"\" or like \"/v1.41\", not '", o.api_version, "'"));
  }
  std::string where;
  if (o.endpoint.empty()) {
    const char* env = std::getenv("DOCKER_HOST");
    if (env != nullptr && *env != '\0') {
      o.endpoint = env;
      where = absl::StrCat(o.endpoint, " (DOCKER_HOST)");
    } else {
      o.endpoint = "unix:///var/run/docker.sock";
      where = absl::StrCat(o.endpoint, " (the default; set DOCKER_HOST or --endpoint)");
    }
  } else {
    where = absl::StrCat(o.endpoint, " (--endpoint; DOCKER_HOST is not used)");
  }
  const DockerTls tls = o.tls ? *o.tls : DockerTlsFromEnvironment();
  std::string text = o.endpoint;
  if (tls.verify && absl::StartsWith(text, "tcp://")) text = absl::StrCat("https://", text.substr(6));
  absl::StatusOr<net::Url> url = net::ParseUrl(text);
  if (!url.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("docker: endpoint ", where, ": ", url.status().message()));
  }
  net::ClientOptions co;
  co.url = *url;
  co.tls.ca_file = o.ca_file;
  if (co.url.tls() && !tls.cert_path.empty()) {
    const std::string ca = tls.cert_path + "/ca.pem";
    const std::string cert = tls.cert_path + "/cert.pem";
    const std::string key = tls.cert_path + "/key.pem";
    if (Exists(ca)) {
      absl::StatusOr<std::string> pem = ReadPem(ca);
      if (!pem.ok()) return pem.status();
      co.tls.ca_pem = *std::move(pem);
      co.tls.system_store = false;  // as the docker CLI: DOCKER_CERT_PATH's CA alone
    }
    if (Exists(cert) && Exists(key)) {
      absl::StatusOr<std::string> c = ReadPem(cert);
      if (!c.ok()) return c.status();
      absl::StatusOr<std::string> k = ReadPem(key);
      if (!k.ok()) return k.status();  // (names the file, never its content)
      co.tls.client_cert_pem = *std::move(c);
      co.tls.client_key_pem = *std::move(k);
    }
  }
  absl::StatusOr<std::shared_ptr<net::Client>> client = net::Client::Make(ex, std::move(co));
  if (!client.ok()) {
    return absl::Status(client.status().code(), absl::StrCat("docker: endpoint ", where, ": ", client.status().message()));
  }
  auto engine = std::make_shared<Engine>();
  engine->client = *std::move(client);
  engine->container = o.container;
  engine->api = o.api_version;
  engine->where = where;
  return std::shared_ptr<Transport>(new DockerTransport(std::move(ex), std::move(engine), std::move(o.upload_progress)));
}

}  // namespace tether
