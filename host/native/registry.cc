// The native providers' entries in the registry (tether/providers.h): each
// one's flags, their parser and its factory. Built only with
// TETHER_NATIVE_PROVIDERS (the default; a tree without it has the local and
// command providers alone, and needs no OpenSSL).
#include "host/native/registry.h"

#include "absl/strings/str_cat.h"
#include "host/native/boat/boat_transport.h"
#include "host/native/daytona/daytona_transport.h"
#include "host/native/docker/docker_transport.h"
#include "host/native/e2b/e2b_transport.h"
#include "host/native/kubernetes/kubernetes_transport.h"
#include "host/native/modal/modal_transport.h"
#include "host/native/runloop/runloop_transport.h"

namespace tether {
namespace {

absl::StatusOr<std::any> ParseDocker(const ProviderFlags& flags) {
  DockerOptions o;  // TLS settings and certificates: DOCKER_TLS_VERIFY, DOCKER_CERT_PATH only
  for (const auto& [flag, value] : flags) {
    if (flag == "--container") {
      o.container = value;
    } else if (flag == "--endpoint") {
      o.endpoint = value;
    } else if (flag == "--ca-file") {
      o.ca_file = value;
    }
  }
  if (o.container.empty()) return absl::InvalidArgumentError("--provider docker needs --container NAME|ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeDocker(boost::asio::any_io_executor ex, const std::any& parsed,
                                                      const ProviderHooks& hooks) {
  const DockerOptions* o = std::any_cast<DockerOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("docker: options not made by its parser");
  DockerOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeDockerTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseE2b(const ProviderFlags& flags) {
  E2bOptions o;
  for (const auto& [flag, value] : flags) {
    if (flag == "--sandbox") o.sandbox_id = value;
    if (flag == "--endpoint") o.api_url = value;
    if (flag == "--sandbox-url") o.sandbox_url = value;
    if (flag == "--ca-file") o.ca_file = value;
  }
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("--provider e2b needs --sandbox ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeE2b(boost::asio::any_io_executor ex, const std::any& parsed,
                                                   const ProviderHooks& hooks) {
  const E2bOptions* o = std::any_cast<E2bOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("e2b: options not made by its parser");
  E2bOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeE2bTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseKubernetes(const ProviderFlags& flags) {
  KubernetesOptions o;
  for (const auto& [flag, value] : flags) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a non-empty value"));
    if (flag == "--pod") {
      o.pod = value;
    } else if (flag == "--namespace") {
      o.namespace_ = value;
    } else if (flag == "--container") {
      o.container = value;
    } else if (flag == "--kubeconfig") {
      o.kubeconfig = value;
    } else if (flag == "--context") {
      o.context = value;
    } else if (flag == "--endpoint") {
      o.endpoint = value;
    } else if (flag == "--ca-file") {
      o.ca_file = value;
    }
  }
  if (o.pod.empty()) return absl::InvalidArgumentError("--provider kubernetes needs --pod NAME");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeKubernetes(boost::asio::any_io_executor ex, const std::any& parsed,
                                                          const ProviderHooks& hooks) {
  const KubernetesOptions* o = std::any_cast<KubernetesOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("kubernetes: options not made by its parser");
  KubernetesOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeKubernetesTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseBoat(const ProviderFlags& flags) {
  BoatOptions o;
  for (const auto& [flag, value] : flags) {
    if (flag == "--sandbox") o.sandbox_id = value;
    if (flag == "--endpoint") o.api_url = value;
    if (flag == "--ca-file") o.ca_file = value;
  }
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("--provider boat needs --sandbox ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeBoat(boost::asio::any_io_executor ex, const std::any& parsed,
                                                    const ProviderHooks& hooks) {
  const BoatOptions* o = std::any_cast<BoatOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("boat: options not made by its parser");
  BoatOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeBoatTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseRunloop(const ProviderFlags& flags) {
  RunloopOptions o;
  for (const auto& [flag, value] : flags) {
    if (flag == "--devbox") o.devbox_id = value;
    if (flag == "--endpoint") o.api_url = value;
    if (flag == "--ca-file") o.ca_file = value;
    if (flag == "--runloop-exec") {
      if (value == "auto") {
        o.mode = RunloopOptions::Mode::kAuto;
      } else if (value == "stream") {
        o.mode = RunloopOptions::Mode::kStream;
      } else if (value == "exchange") {
        o.mode = RunloopOptions::Mode::kExchange;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--runloop-exec takes auto, stream or exchange, not '", value, "'"));
      }
    }
  }
  if (o.devbox_id.empty()) return absl::InvalidArgumentError("--provider runloop needs --devbox ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeRunloop(boost::asio::any_io_executor ex, const std::any& parsed,
                                                       const ProviderHooks& hooks) {
  const RunloopOptions* o = std::any_cast<RunloopOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("runloop: options not made by its parser");
  RunloopOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeRunloopTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseDaytona(const ProviderFlags& flags) {
  DaytonaOptions o;
  for (const auto& [flag, value] : flags) {
    if (flag == "--sandbox") o.sandbox_id = value;
    if (flag == "--endpoint") o.api_url = value;
    if (flag == "--ca-file") o.ca_file = value;
  }
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("--provider daytona needs --sandbox ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeDaytona(boost::asio::any_io_executor ex, const std::any& parsed,
                                                       const ProviderHooks& hooks) {
  const DaytonaOptions* o = std::any_cast<DaytonaOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("daytona: options not made by its parser");
  DaytonaOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeDaytonaTransport(std::move(ex), std::move(copy));
}

absl::StatusOr<std::any> ParseModal(const ProviderFlags& flags) {
  ModalOptions o;
  for (const auto& [flag, value] : flags) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a non-empty value"));
    if (flag == "--sandbox") o.sandbox_id = value;
    if (flag == "--endpoint") o.server_url = value;
    if (flag == "--ca-file") o.ca_file = value;
  }
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("--provider modal needs --sandbox ID");
  return std::any(std::move(o));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeModal(boost::asio::any_io_executor ex, const std::any& parsed,
                                                     const ProviderHooks& hooks) {
  const ModalOptions* o = std::any_cast<ModalOptions>(&parsed);
  if (o == nullptr) return absl::InvalidArgumentError("modal: options not made by its parser");
  ModalOptions copy = *o;
  if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
  return MakeModalTransport(std::move(ex), std::move(copy));
}

}  // namespace

void AppendNativeProviders(std::vector<ProviderInfo>& r) {
  r.push_back(ProviderInfo{
      "docker",
      "a container through the Docker Engine API (Docker, or podman's\n"
      "`podman system service`); the engine from --endpoint, else $DOCKER_HOST,\n"
      "else unix:///var/run/docker.sock; TLS from DOCKER_TLS_VERIFY and\n"
      "DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem)",
      {{"--container", "the container's name or id, required"},
       {"--endpoint", "the API's URL: unix:///path, tcp://host:port, https://host:port"},
       {"--ca-file", "a PEM CA to trust for the API's TLS certificate"}},
      false,
      ParseDocker,
      MakeDocker});
  r.push_back(ProviderInfo{
      "e2b",
      "an E2B sandbox through envd's process API; the API key comes\n"
      "from E2B_API_KEY (never a flag)",
      {{"--sandbox", "the sandbox id, required"},
       {"--endpoint", "the API URL (default $E2B_API_URL, else https://api.$E2B_DOMAIN)"},
       {"--sandbox-url", "envd's URL (default $E2B_SANDBOX_URL, else from the API's answer)"},
       {"--ca-file", "a PEM CA file trusted besides the system's"}},
      false,
      ParseE2b,
      MakeE2b});
  r.push_back(ProviderInfo{
      "kubernetes",
      "a pod, through the API server's exec (WebSocket, no kubectl);\n"
      "cluster and credentials from the kubeconfig (token, tokenFile or\n"
      "client certificate; exec plugins are not supported)",
      {{"--pod", "the pod, required"},
       {"--namespace", "its namespace (default: the context's, else default)"},
       {"--container", "the container (default: the pod's only one)"},
       {"--kubeconfig", "the kubeconfig (default: first of $KUBECONFIG, else ~/.kube/config)"},
       {"--context", "the context (default: current-context)"},
       {"--endpoint", "the API server URL, instead of the kubeconfig's"},
       {"--ca-file", "a PEM CA trusted for the API server, besides the kubeconfig's"}},
      false,
      ParseKubernetes,
      MakeKubernetes});
  r.push_back(ProviderInfo{
      "boat",
      "a Boat sandbox through its REST API (one-shot commands: the\n"
      "exchange tunnel); the API key comes from BOAT_API_KEY (never a flag)",
      {{"--sandbox", "the sandbox id, required"},
       {"--endpoint", "the API URL (default $BOAT_API_URL; one is required)"},
       {"--ca-file", "a PEM CA file trusted besides the system's"}},
      false,
      ParseBoat,
      MakeBoat});
  r.push_back(ProviderInfo{
      "runloop",
      "a Runloop devbox through its execution API (text only: the text\n"
      "tunnel over execute_async + SSE; the exchange tunnel where stdin\n"
      "kills an execution); the API key comes from RUNLOOP_API_KEY (never a flag)",
      {{"--devbox", "the devbox id, required"},
       {"--endpoint", "the API URL (default $RUNLOOP_BASE_URL, else https://api.runloop.ai)"},
       {"--ca-file", "a PEM CA file trusted besides the system's"},
       {"--runloop-exec", "auto|stream|exchange (default auto: stream unless stdin kills executions)"}},
      false,
      ParseRunloop,
      MakeRunloop});
  r.push_back(ProviderInfo{
      "daytona",
      "a Daytona sandbox through its toolbox's session processes (text\n"
      "only: the text tunnel); the key comes from DAYTONA_API_KEY (or\n"
      "DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID), never a flag",
      {{"--sandbox", "the sandbox id or name, required"},
       {"--endpoint", "the API URL (default $DAYTONA_API_URL, else https://app.daytona.io/api)"},
       {"--ca-file", "a PEM CA file trusted besides the system's (API and toolbox)"}},
      false,
      ParseDaytona,
      MakeDaytona});
  r.push_back(ProviderInfo{
      "modal",
      "a Modal sandbox through its task command router (gRPC; exact bytes:\n"
      "the binary tunnel); the token comes from MODAL_TOKEN_ID and\n"
      "MODAL_TOKEN_SECRET, else ~/.modal.toml (never a flag)",
      {{"--sandbox", "the sandbox id, required"},
       {"--endpoint", "the control plane URL (default $MODAL_SERVER_URL, else https://api.modal.com:443)"},
       {"--ca-file", "a PEM CA file trusted besides the system's (control plane and router)"}},
      false,
      ParseModal,
      MakeModal});
}

}  // namespace tether
