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
// username/password.
//
// A KUBECONFIG list (a:b:c) is merged as kubectl merges it: files that do
// not exist are skipped; the first file that sets current-context gives
// it; a context, cluster or user comes whole from the first file that has
// an entry of that name, its relative paths resolved against that file's
// directory. --kubeconfig FILE reads that file alone.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::k8s {

inline constexpr std::size_t kMaxKubeconfigBytes = 4u << 20;  // the file and each file it names

struct KubeconfigLoad {
  std::string path;     // empty: the files of $KUBECONFIG, merged, else $HOME/.kube/config
  std::string context;  // empty: current-context
};

// What one context resolves to.
struct Kubeconfig {
  std::string path;       // the file read, or "the kubeconfig files a, b" (for messages)
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

// One file's text, the directory its relative paths resolve against, and
// its name in messages.
struct KubeconfigText {
  std::string text, dir, where;
};

// Several files merged as a KUBECONFIG list is (above), in that order.
absl::StatusOr<Kubeconfig> ParseKubeconfigs(const std::vector<KubeconfigText>& files, std::string_view context);

// The files LoadKubeconfig reads when `path` is empty ($KUBECONFIG's,
// without repeats, else $HOME/.kube/config); kNotFound when neither is set.
absl::StatusOr<std::vector<std::string>> DefaultKubeconfigPaths();

}  // namespace tether::k8s
