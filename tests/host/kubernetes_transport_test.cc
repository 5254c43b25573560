#include "host/native/kubernetes/kubernetes_transport.h"

#include <doctest.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tether/providers.h"

namespace tether {
namespace {

namespace fs = std::filesystem;

constexpr char kToken[] = "tok-should-never-show-1234";

std::string WriteKubeconfig(const std::string& name, const std::string& server, const std::string& user) {
  const fs::path p = fs::temp_directory_path() / name;
  std::ofstream(p) << "current-context: c\n"
                   << "clusters:\n- name: k\n  cluster: {server: '" << server << "', insecure-skip-tls-verify: true}\n"
                   << "users:\n- name: u\n  user: " << user << "\n"
                   << "contexts:\n- name: c\n  context: {cluster: k, user: u, namespace: ns1}\n";
  return p.string();
}

TEST_CASE("the factory needs a pod and reports kubeconfig errors as its own") {
  boost::asio::io_context io;
  KubernetesOptions o;
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(!t.ok());
  CHECK(t.status().message().find("--pod") != std::string_view::npos);

  o.pod = "p";
  o.kubeconfig = "/nonexistent/tether-kubeconfig";
  t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(!t.ok());
  CHECK(absl::IsNotFound(t.status()));

  o.kubeconfig = WriteKubeconfig("tether-k8s-exec.yaml", "https://127.0.0.1:1", "{exec: {command: x}}");
  t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(!t.ok());
  CHECK(absl::IsUnimplemented(t.status()));
  fs::remove(o.kubeconfig);
}

TEST_CASE("plain http to a host that is not loopback is refused, naming the server but not the token") {
  boost::asio::io_context io;
  KubernetesOptions o;
  o.pod = "p";
  o.kubeconfig = WriteKubeconfig("tether-k8s-http.yaml", "http://k8s.example.com", std::string("{token: ") + kToken + "}");
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(!t.ok());
  CHECK(t.status().message().find("http://k8s.example.com") != std::string_view::npos);
  CHECK(t.status().message().find(kToken) == std::string_view::npos);
  fs::remove(o.kubeconfig);
}

TEST_CASE("a transport names the pod, namespace and container in its sandbox id") {
  boost::asio::io_context io;
  KubernetesOptions o;
  o.pod = "web-0";
  o.container = "app";
  o.kubeconfig = WriteKubeconfig("tether-k8s-ok.yaml", "https://127.0.0.1:6443", std::string("{token: ") + kToken + "}");
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK((*t)->name() == "kubernetes");
  CHECK((*t)->sandbox_id() == "https://127.0.0.1:6443/ns1/web-0/app");  // the context's namespace
  CHECK((*t)->capabilities().exact_bytes);
  CHECK((*t)->capabilities().cut_prone);
  CHECK(!(*t)->capabilities().stdin_eof);  // unknown until an exec chose v5
  o.namespace_ = "other";
  o.endpoint = "https://127.0.0.1:7443";
  t = MakeKubernetesTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK((*t)->sandbox_id() == "https://127.0.0.1:7443/other/web-0/app");
  fs::remove(o.kubeconfig);
}

TEST_CASE("the registry parses the kubernetes flags and needs --pod") {
  absl::StatusOr<const ProviderInfo*> info = FindProvider("kubernetes");
  REQUIRE(info.ok());
  ProviderFlags flags = {{"--namespace", "n"}};
  absl::StatusOr<std::any> parsed = ParseProviderFlags(**info, flags);
  REQUIRE(!parsed.ok());
  CHECK(parsed.status().message().find("--pod") != std::string_view::npos);
  flags = {{"--pod", "p"}, {"--namespace", "n"}, {"--container", "c"}, {"--context", "x"},
           {"--kubeconfig", "/k"}, {"--endpoint", "https://127.0.0.1:1"}, {"--ca-file", "/ca.pem"}};
  parsed = ParseProviderFlags(**info, flags);
  REQUIRE(parsed.ok());
  const KubernetesOptions& o = std::any_cast<const KubernetesOptions&>(*parsed);
  CHECK(o.pod == "p");
  CHECK(o.namespace_ == "n");
  CHECK(o.container == "c");
  CHECK(o.context == "x");
  CHECK(o.kubeconfig == "/k");
  CHECK(o.endpoint == "https://127.0.0.1:1");
  CHECK(o.ca_file == "/ca.pem");
  flags = {{"--pod", "p"}, {"--prefix", "sh -c"}};
  CHECK(!ParseProviderFlags(**info, flags).ok());  // another provider's flag
}

}  // namespace
}  // namespace tether
