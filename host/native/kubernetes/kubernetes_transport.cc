#include "tether/providers/kubernetes.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/codec/k8s_channel.h"
#include "tether/errors.h"
#include "host/native/kubernetes/kubernetes_channel.h"
#include "host/native/kubernetes/kubeconfig.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "tether/shell_setup.h"

namespace tether {
namespace {

namespace asio = boost::asio;

constexpr int kUpgradeAttempts = 4;             // an exec refused before it started
constexpr int kScriptAttempts = 3;              // a setup script cut before its Status
constexpr std::chrono::milliseconds kFirstBackoff{50};

using k8s::KubernetesChannel;

// An upgrade refused before the exec started: worth another try.
bool Retryable(const absl::Status& st) {
  if (absl::IsUnavailable(st)) return true;
  // HttpError's message is "<what>: HTTP <code>: ..." (host/net/http.h).
  return absl::IsInternal(st) && absl::StrContains(st.message(), ": HTTP 5");
}

// "pod NS/POD [container C]": the pod in messages.
std::string PodWhere(const KubernetesOptions& o, const std::string& ns) {
  return absl::StrCat("pod ", ns, "/", o.pod, o.container.empty() ? "" : absl::StrCat(" container ", o.container));
}

// The server, namespace, pod and container: saved in process references.
std::string PodId(const KubernetesOptions& o, const k8s::Kubeconfig& kc, const std::string& ns) {
  return absl::StrCat(o.endpoint.empty() ? kc.server : o.endpoint, "/", ns, "/", o.pod,
                      o.container.empty() ? "" : absl::StrCat("/", o.container));
}

class KubernetesTransport final : public native::NativeTransport {
 public:
  KubernetesTransport(asio::any_io_executor ex, KubernetesOptions o, k8s::Kubeconfig kc,
                      std::shared_ptr<net::Client> client, std::string ns)
      : NativeTransport(ex, {"kubernetes", PodId(o, kc, ns), PodWhere(o, ns)}, o.upload_progress),
        ex_(std::move(ex)),
        o_(std::move(o)),
        kc_(std::move(kc)),
        client_(std::move(client)),
        ns_(std::move(ns)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;
    c.streaming = true;
    c.costly_bytes = true;
    c.cut_prone = true;
    c.stdin_eof = v5_.value_or(false);  // known after the first exec
    return c;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    absl::StatusOr<std::unique_ptr<KubernetesChannel>> ch = co_await Open(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    co_return std::unique_ptr<Channel>(*std::move(ch));
  }

 protected:
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) override {
    co_return co_await PutByShell(std::move(path), bytes, mode, known_missing);
  }

  // The shell runner: `sh -c script`, run again when the stream was cut
  // before its Status (setup scripts are idempotent).
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) override {
    for (int attempt = 1;; ++attempt) {
      std::vector<std::string> argv = ShellArgv(script);  // (named: g++ 12 and temporaries in coroutines)
      absl::StatusOr<std::unique_ptr<KubernetesChannel>> ch = co_await Open(std::move(argv));
      if (!ch.ok()) co_return ch.status();
      absl::StatusOr<ScriptResult> r = co_await RunScriptOn(**ch, input, progress());
      const bool cut = (*ch)->cut() || (!r.ok() && absl::IsUnavailable(r.status()));
      if (!cut) co_return r;
      if (attempt == kScriptAttempts) {
        co_return absl::UnavailableError(absl::StrCat("kubernetes: a setup command in ", where(), " was cut ",
                                                      kScriptAttempts, " times",
                                                      r.ok() ? "" : absl::StrCat(": ", r.status().message())));
      }
    }
  }

 private:
  asio::awaitable<absl::StatusOr<std::unique_ptr<KubernetesChannel>>> Open(std::vector<std::string> argv) {
    if (argv.empty()) co_return absl::InvalidArgumentError("kubernetes exec: empty argv");
    std::string target = absl::StrCat("/api/v1/namespaces/", net::UrlEncode(ns_), "/pods/", net::UrlEncode(o_.pod),
                                      "/exec?");
    for (const std::string& a : argv) absl::StrAppend(&target, "command=", net::UrlEncode(a), "&");
    if (!o_.container.empty()) absl::StrAppend(&target, "container=", net::UrlEncode(o_.container), "&");
    absl::StrAppend(&target, "stdin=true&stdout=true&stderr=true&tty=false");
    net::Headers headers;
    if (!kc_.token.empty()) headers.emplace_back("Authorization", absl::StrCat("Bearer ", kc_.token));
    std::vector<std::string> protocols;
    protocols.emplace_back(codec::kK8sProtocolV5);
    protocols.emplace_back(codec::kK8sProtocolV4);
    auto backoff = kFirstBackoff;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<std::unique_ptr<net::WebSocket>> ws = co_await client_->OpenWebSocket(target, headers, protocols);
      if (ws.ok()) {
        const std::string chosen((*ws)->subprotocol());
        if (chosen != codec::kK8sProtocolV5 && chosen != codec::kK8sProtocolV4) {
          (*ws)->Close();
          co_return absl::FailedPreconditionError(absl::StrCat(
              "kubernetes: the API server chose exec subprotocol '", chosen, "'; tether needs ",
              std::string(codec::kK8sProtocolV5), " or ", std::string(codec::kK8sProtocolV4)));
        }
        v5_ = chosen == codec::kK8sProtocolV5;
        co_return k8s::MakeKubernetesChannel(ex_, *std::move(ws), *v5_, where());
      }
      if (!Retryable(ws.status()) || attempt == kUpgradeAttempts) co_return ExecError(ws.status());
      asio::steady_timer pause(ex_, backoff);
      auto [ec] = co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return ExecError(ws.status());
      backoff *= 2;
    }
  }

  absl::Status ExecError(const absl::Status& st) const {
    const std::string m(st.message());
    if (absl::IsNotFound(st)) {
      return absl::NotFoundError(absl::StrCat("kubernetes: pod '", o_.pod, "' not found in namespace '", ns_, "' (",
                                              m, ")"));
    }
    if (absl::IsUnauthenticated(st)) {
      return absl::UnauthenticatedError(absl::StrCat("kubernetes: the API server refused the credentials of context '",
                                                     kc_.context, "' in ", kc_.path, " (", m, ")"));
    }
    if (net::IsUntrustedServer(st)) {
      return absl::PermissionDeniedError(absl::StrCat("kubernetes: the API server of context '", kc_.context, "' in ",
                                                      kc_.path, " was not trusted (", m, ")"));
    }
    if (absl::IsPermissionDenied(st)) {
      return absl::PermissionDeniedError(absl::StrCat("kubernetes: context '", kc_.context,
                                                      "' may not exec in ", where(), " (", m, ")"));
    }
    if (Retryable(st)) {
      return absl::UnavailableError(absl::StrCat("kubernetes: exec in ", where(), " failed: ", m));
    }
    return absl::Status(st.code(), absl::StrCat("kubernetes: exec in ", where(), " failed: ", m));
  }

  asio::any_io_executor ex_;
  KubernetesOptions o_;
  k8s::Kubeconfig kc_;
  std::shared_ptr<net::Client> client_;
  std::string ns_;
  std::optional<bool> v5_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeKubernetesTransport(asio::any_io_executor ex, KubernetesOptions o) {
  if (o.pod.empty()) return absl::InvalidArgumentError("kubernetes: a pod is required (--pod NAME)");
  absl::StatusOr<k8s::Kubeconfig> kc = k8s::LoadKubeconfig({o.kubeconfig, o.context});
  if (!kc.ok()) return kc.status();
  const std::string& server = o.endpoint.empty() ? kc->server : o.endpoint;
  absl::StatusOr<net::Url> url = net::ParseUrl(server);
  if (!url.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("kubernetes: the API server URL '", server, "'",
                                                   o.endpoint.empty() ? absl::StrCat(" (from ", kc->path, ")") : "",
                                                   ": ", url.status().message()));
  }
  net::ClientOptions co;
  co.url = *std::move(url);
  co.tls.ca_pem = kc->ca_pem;
  co.tls.ca_file = o.ca_file;
  co.tls.insecure_skip_verify = kc->insecure_skip_tls_verify;
  co.tls.server_name = kc->tls_server_name;
  co.tls.client_cert_pem = kc->client_cert_pem;
  co.tls.client_key_pem = kc->client_key_pem;
  absl::StatusOr<std::shared_ptr<net::Client>> client = net::Client::Make(ex, std::move(co));
  if (!client.ok()) return client.status();
  std::string ns = !o.namespace_.empty() ? o.namespace_ : !kc->namespace_.empty() ? kc->namespace_ : "default";
  return std::shared_ptr<Transport>(
      new KubernetesTransport(std::move(ex), std::move(o), *std::move(kc), *std::move(client), std::move(ns)));
}

}  // namespace tether
