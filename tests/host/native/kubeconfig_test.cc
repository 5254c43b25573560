#include "host/native/kubernetes/kubeconfig.h"

#include <doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tether::k8s {
namespace {

namespace fs = std::filesystem;

constexpr char kSecretToken[] = "s3cr3t-token-value";

// A scratch directory with files written by the test, removed at the end.
struct Dir {
  fs::path path;
  Dir() {
    std::string t = (fs::temp_directory_path() / "tether-kubeconfig-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~Dir() { fs::remove_all(path); }
  std::string Write(const std::string& name, const std::string& text) const {
    const fs::path p = path / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

std::string Config(const std::string& cluster, const std::string& user, const std::string& extra_context = "") {
  return absl::StrCat("apiVersion: v1\nkind: Config\ncurrent-context: dev\n",
                      "clusters:\n- name: c1\n  cluster:\n", cluster,
                      "users:\n- name: u1\n  user:\n", user,
                      "contexts:\n- name: dev\n  context:\n    cluster: c1\n    user: u1\n    namespace: team\n",
                      extra_context);
}

TEST_CASE("the current context resolves server, CA data, token and namespace") {
  const std::string ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(
      Config(absl::StrCat("    server: https://127.0.0.1:6443\n    certificate-authority-data: ",
                          absl::Base64Escape(ca), "\n    tls-server-name: kubernetes\n"),
             absl::StrCat("    token: ", kSecretToken, "\n")),
      "/nowhere", "test-config", "");
  REQUIRE(kc.ok());
  CHECK(kc->context == "dev");
  CHECK(kc->server == "https://127.0.0.1:6443");
  CHECK(kc->ca_pem == ca);
  CHECK(kc->tls_server_name == "kubernetes");
  CHECK(!kc->insecure_skip_tls_verify);
  CHECK(kc->token == kSecretToken);
  CHECK(kc->namespace_ == "team");
  CHECK(kc->client_cert_pem.empty());
}

TEST_CASE("a named context wins over current-context") {
  const std::string text =
      "current-context: dev\n"
      "clusters:\n- name: c1\n  cluster: {server: https://a.example}\n"
      "- name: c2\n  cluster: {server: https://b.example}\n"
      "users:\n- name: u1\n  user: {token: t}\n"
      "contexts:\n- name: dev\n  context: {cluster: c1, user: u1, namespace: team}\n"
      "- name: prod\n  context: {cluster: c2, user: u1}\n";
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(text, "/", "cfg", "prod");
  REQUIRE(kc.ok());
  CHECK(kc->context == "prod");
  CHECK(kc->server == "https://b.example");
  CHECK(kc->namespace_.empty());
  kc = ParseKubeconfig(text, "/", "cfg", "");
  REQUIRE(kc.ok());
  CHECK(kc->server == "https://a.example");
}

TEST_CASE("relative file paths are resolved against the kubeconfig's directory") {
  Dir d;
  d.Write("certs/ca.pem", "CA-PEM");
  d.Write("certs/client.crt", "CLIENT-CERT");
  d.Write("certs/client.key", "CLIENT-KEY");
  d.Write("token", "  file-token\n");
  d.Write(
      "config",
      Config("    server: https://k.example:443\n    certificate-authority: certs/ca.pem\n",
             "    tokenFile: token\n    client-certificate: certs/client.crt\n    client-key: certs/client.key\n"));
  KubeconfigLoad load;
  load.path = (d.path / "config").string();
  absl::StatusOr<Kubeconfig> kc = LoadKubeconfig(load);
  REQUIRE(kc.ok());
  CHECK(kc->ca_pem == "CA-PEM");
  CHECK(kc->token == "file-token");
  CHECK(kc->client_cert_pem == "CLIENT-CERT");
  CHECK(kc->client_key_pem == "CLIENT-KEY");
}

TEST_CASE("insecure-skip-tls-verify is read; anything but true/false is refused") {
  absl::StatusOr<Kubeconfig> kc =
      ParseKubeconfig(Config("    server: http://127.0.0.1:1\n    insecure-skip-tls-verify: true\n", "    token: t\n"),
                      "/", "cfg", "");
  REQUIRE(kc.ok());
  CHECK(kc->insecure_skip_tls_verify);
  kc = ParseKubeconfig(Config("    server: http://127.0.0.1:1\n    insecure-skip-tls-verify: maybe\n", "    token: t\n"),
                       "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("insecure-skip-tls-verify") != std::string_view::npos);
}

TEST_CASE("a missing context, cluster or user is a clear error naming it") {
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(Config("    server: https://x\n", "    token: t\n"), "/", "cfg", "nope");
  REQUIRE(!kc.ok());
  CHECK(absl::IsInvalidArgument(kc.status()));
  CHECK(kc.status().message() == "cfg: no entry 'nope' in contexts");

  std::string text = Config("    server: https://x\n", "    token: t\n");
  text.replace(text.find("cluster: c1"), 11, "cluster: c9");
  kc = ParseKubeconfig(text, "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message() == "cfg: no entry 'c9' in clusters");

  text = Config("    server: https://x\n", "    token: t\n");
  text.replace(text.find("user: u1"), 8, "user: u9");
  kc = ParseKubeconfig(text, "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message() == "cfg: no entry 'u9' in users");

  kc = ParseKubeconfig("apiVersion: v1\nkind: Config\n", "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("no current-context") != std::string_view::npos);
}

TEST_CASE("a cluster without a server is refused") {
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(Config("    insecure-skip-tls-verify: true\n", "    token: t\n"),
                                                  "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message() == "cfg: cluster 'c1' has no server");
}

TEST_CASE("exec plugins and auth-provider are unsupported, and say so") {
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(
      Config("    server: https://x\n",
             "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"),
      "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(absl::IsUnimplemented(kc.status()));
  CHECK(kc.status().message().find("'exec', which tether does not support") != std::string_view::npos);

  kc = ParseKubeconfig(Config("    server: https://x\n", "    auth-provider:\n      name: gcp\n"), "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(absl::IsUnimplemented(kc.status()));
  CHECK(kc.status().message().find("auth-provider") != std::string_view::npos);
}

TEST_CASE("unreadable files are clear errors that name the file, never its content") {
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(
      Config("    server: https://x\n    certificate-authority: missing-ca.pem\n", "    token: t\n"), "/d", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(absl::IsNotFound(kc.status()));
  CHECK(kc.status().message().find("/d/missing-ca.pem") != std::string_view::npos);

  KubeconfigLoad load;
  load.path = "/nonexistent/kubeconfig";
  kc = LoadKubeconfig(load);
  REQUIRE(!kc.ok());
  CHECK(absl::IsNotFound(kc.status()));
  CHECK(kc.status().message().find("/nonexistent/kubeconfig") != std::string_view::npos);
}

TEST_CASE("malformed YAML and bad base64 are errors without the secret") {
  absl::StatusOr<Kubeconfig> kc =
      ParseKubeconfig(absl::StrCat("users: [ {name: u, user: {token: ", kSecretToken, "}"), "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(absl::IsInvalidArgument(kc.status()));
  CHECK(kc.status().message().find("not valid YAML") != std::string_view::npos);
  CHECK(kc.status().message().find(kSecretToken) == std::string_view::npos);

  kc = ParseKubeconfig(Config("    server: https://x\n", "    client-certificate-data: '!!!'\n    client-key-data: '!!!'\n"),
                       "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("client-certificate-data is not base64") != std::string_view::npos);

  kc = ParseKubeconfig("- just\n- a list\n", "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("not a kubeconfig") != std::string_view::npos);
}

TEST_CASE("a client certificate without its key is refused") {
  absl::StatusOr<Kubeconfig> kc = ParseKubeconfig(
      Config("    server: https://x\n", absl::StrCat("    client-certificate-data: ", absl::Base64Escape("C"), "\n")),
      "/", "cfg", "");
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("without its key") != std::string_view::npos);
}

// Sets KUBECONFIG (or unsets it, for nullptr) for one scope.
struct KubeconfigEnv {
  std::string saved;
  bool had;
  explicit KubeconfigEnv(const char* value) {
    const char* old = std::getenv("KUBECONFIG");
    had = old != nullptr;
    saved = had ? old : "";
    if (value) {
      setenv("KUBECONFIG", value, 1);
    } else {
      unsetenv("KUBECONFIG");
    }
  }
  ~KubeconfigEnv() {
    if (had) {
      setenv("KUBECONFIG", saved.c_str(), 1);
    } else {
      unsetenv("KUBECONFIG");
    }
  }
};

TEST_CASE("KUBECONFIG's files, without repeats, are the default, else ~/.kube/config") {
  {
    KubeconfigEnv env("/a/one:/b/two::/a/one");
    absl::StatusOr<std::vector<std::string>> p = DefaultKubeconfigPaths();
    REQUIRE(p.ok());
    CHECK(*p == std::vector<std::string>{"/a/one", "/b/two"});
  }
  KubeconfigEnv env(nullptr);
  absl::StatusOr<std::vector<std::string>> p = DefaultKubeconfigPaths();
  REQUIRE(p.ok());
  CHECK(*p == std::vector<std::string>{absl::StrCat(std::getenv("HOME"), "/.kube/config")});
}

TEST_CASE("a KUBECONFIG list is merged as kubectl merges it") {
  Dir d;
  const std::string ca = "-----BEGIN CERTIFICATE-----\nMIIB-from-b\n-----END CERTIFICATE-----\n";
  d.Write("b/ca.pem", ca);
  d.Write("b/token", "token-from-b\n");
  // a: the current context and a user; its cluster lives in b.
  const std::string a = d.Write("a/config",
                                "current-context: work\n"
                                "contexts:\n- name: work\n  context: {cluster: shared, user: me, namespace: ns-a}\n"
                                "users:\n- name: me\n  user: {token: token-from-a}\n");
  // b: another current-context (ignored: a set one first), the cluster with
  // a relative CA path (resolved against b's directory), a user of the same
  // name (ignored: a's wins) and a context only b has.
  const std::string b = d.Write("b/config",
                                "current-context: other\n"
                                "clusters:\n- name: shared\n  cluster: {server: 'https://b.example:6443', "
                                "certificate-authority: ca.pem, tls-server-name: kube-b}\n"
                                "- name: only-b\n  cluster: {server: 'https://only-b.example'}\n"
                                "users:\n- name: me\n  user: {token: token-of-b-ignored}\n"
                                "- name: filer\n  user: {tokenFile: token}\n"
                                "contexts:\n- name: other\n  context: {cluster: only-b, user: filer}\n");
  // c: a cluster of the same name as b's, later: ignored.
  const std::string c = d.Write("c/config",
                                "clusters:\n- name: shared\n  cluster: {server: 'https://c.example'}\n");
  const std::string missing = (d.path / "nowhere" / "config").string();
  KubeconfigEnv env(absl::StrCat(a, ":", missing, ":", b, ":", c).c_str());

  absl::StatusOr<Kubeconfig> kc = LoadKubeconfig({});
  REQUIRE_MESSAGE(kc.ok(), kc.status());
  CHECK(kc->context == "work");
  CHECK(kc->server == "https://b.example:6443");
  CHECK(kc->ca_pem == ca);
  CHECK(kc->tls_server_name == "kube-b");
  CHECK(kc->token == "token-from-a");
  CHECK(kc->namespace_ == "ns-a");

  // A context only a later file has, with its user's tokenFile relative to that file.
  kc = LoadKubeconfig({.path = "", .context = "other"});
  REQUIRE_MESSAGE(kc.ok(), kc.status());
  CHECK(kc->server == "https://only-b.example");
  CHECK(kc->token == "token-from-b");

  // --kubeconfig FILE reads that file alone: a's context has no cluster there.
  kc = LoadKubeconfig({.path = a, .context = ""});
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("no entry 'shared' in clusters") != std::string_view::npos);

  // A name no file has: the error names the files.
  kc = LoadKubeconfig({.path = "", .context = "nope"});
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find("the kubeconfig files") != std::string_view::npos);
  CHECK(kc.status().message().find(b) != std::string_view::npos);
}

TEST_CASE("a KUBECONFIG list: every file missing is not found; one malformed file is named") {
  Dir d;
  const std::string one = (d.path / "one").string(), two = (d.path / "two").string();
  {
    KubeconfigEnv env(absl::StrCat(one, ":", two).c_str());
    absl::StatusOr<Kubeconfig> kc = LoadKubeconfig({});
    REQUIRE(!kc.ok());
    CHECK(absl::IsNotFound(kc.status()));
    CHECK(kc.status().message().find(two) != std::string_view::npos);
  }
  const std::string good = d.Write("good", Config("    server: https://x\n", "    token: t\n"));
  const std::string bad = d.Write("bad", "clusters: [ {name: x\n");
  KubeconfigEnv env(absl::StrCat(good, ":", bad).c_str());
  absl::StatusOr<Kubeconfig> kc = LoadKubeconfig({});
  REQUIRE(!kc.ok());
  CHECK(kc.status().message().find(bad) != std::string_view::npos);
  CHECK(kc.status().message().find("not valid YAML") != std::string_view::npos);
}

}  // namespace
}  // namespace tether::k8s
