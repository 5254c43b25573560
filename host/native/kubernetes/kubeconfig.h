// The kubeconfig file: which API server, how to trust it and who we are, as
// kubectl reads it (the subset tether supports). Credentials are loaded into
// memory here and never appear in an error message.
//
//   absl::StatusOr<k8s::Kubeconfig> kc = k8s::LoadKubeconfig({});   // $KUBECONFIG or ~/.kube/config
//   if (!kc.ok()) return kc.status();
//   net::ClientOptions o{.url = *net::ParseUrl(kc->server)};
//   o.tls.ca_pem = kc->ca_pem;
//
// Supported: clusters[].cluster.{server, certificate-authority(-data),
// insecure-skip-tls-verify, tls-server-name}; users[].user.{token,
// tokenFile, client-certificate(-data), client-key(-data)}; contexts[].
// context.{cluster, user, namespace}; current-context. Relative file paths
// are resolved against the kubeconfig's directory. Not supported (a clear
// kUnimplemented error): exec credential plugins, auth-provider,
// username/password; and of a KUBECONFIG list only the first file is read
// (kubectl merges them all).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::k8s {

inline constexpr std::size_t kMaxKubeconfigBytes = 4u << 20;  // the file and each file it names

struct KubeconfigLoad {
  std::string path;     // empty: the first file of $KUBECONFIG, else $HOME/.kube/config
  std::string context;  // empty: current-context
};

// What one context resolves to.
struct Kubeconfig {
  std::string path;       // the file read (for messages)
  std::string context;    // the context's name
  std::string server;     // "https://host:6443[/prefix]"
  std::string ca_pem;     // certificate-authority(-data), PEM; empty: system store only
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;
  std::string namespace_;       // the context's namespace; may be empty
  std::string token;            // bearer token (secret)
  std::string client_cert_pem;  // client certificate, PEM
  std::string client_key_pem;   // its key, PEM (secret)
};

// Reads and resolves a kubeconfig file (kNotFound when it does not exist,
// kInvalidArgument when it is malformed or names a missing context,
// cluster or user, kUnimplemented for unsupported auth).
absl::StatusOr<Kubeconfig> LoadKubeconfig(const KubeconfigLoad& load);

// The same from text already read: `dir` resolves relative paths, `where`
// names the file in messages.
absl::StatusOr<Kubeconfig> ParseKubeconfig(std::string_view yaml, std::string_view dir, std::string_view where,
                                           std::string_view context);

// The file LoadKubeconfig reads when `path` is empty (first of $KUBECONFIG,
// else $HOME/.kube/config); kNotFound when neither is set.
absl::StatusOr<std::string> DefaultKubeconfigPath();

}  // namespace tether::k8s
