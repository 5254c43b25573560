#include "host/native/kubernetes/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tether::k8s {
namespace {

// Reads at most kMaxKubeconfigBytes of `path`; `what` names it in messages.
absl::StatusOr<std::string> ReadBounded(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    const std::string why = absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(e));
    return e == ENOENT ? absl::NotFoundError(why) : absl::FailedPreconditionError(why);
  }
  std::string out(kMaxKubeconfigBytes + 1, '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  if (in.bad()) return absl::FailedPreconditionError(absl::StrCat("cannot read ", what, " ", path));
  out.resize(static_cast<std::size_t>(in.gcount()));
  if (out.size() > kMaxKubeconfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is larger than ", kMaxKubeconfigBytes, " bytes"));
  }
  return out;
}

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return absl::StrCat(dir, "/", path);
}

// A scalar field as a string; nullopt when absent; an error when it is not a scalar.
absl::StatusOr<std::optional<std::string>> Scalar(const YAML::Node& map, const char* key, const std::string& where) {
  const YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return std::optional<std::string>();
  if (!n.IsScalar()) return absl::InvalidArgumentError(absl::StrCat(where, ": '", key, "' is not a string"));
  return std::optional<std::string>(n.Scalar());
}

// The `kind` entry (clusters, users, contexts) called `name`: its inner map.
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list, const char* inner, const std::string& name,
                                 const std::string& where) {
  const YAML::Node l = root[list];
  if (l.IsDefined() && !l.IsNull() && !l.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", list, "' is not a list"));
  }
  if (l.IsSequence()) {
    for (const YAML::Node& e : l) {
      if (!e.IsMap()) continue;
      const YAML::Node n = e["name"];
      if (!n.IsScalar() || n.Scalar() != name) continue;
      const YAML::Node body = e[inner];
      if (!body.IsDefined() || body.IsNull()) return YAML::Node(YAML::NodeType::Map);
      if (!body.IsMap()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", list, " entry '", name, "' has no '", inner, "' map"));
      }
      return body;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": no entry '", name, "' in ", list));
}

// PEM from `key`-data (base64) or from the file `key` names.
absl::StatusOr<std::string> Pem(const YAML::Node& map, const char* key, const std::string& dir, const std::string& where,
                                const std::string& what) {
  const std::string data_key = absl::StrCat(key, "-data");
  absl::StatusOr<std::optional<std::string>> data = Scalar(map, data_key.c_str(), where);
  if (!data.ok()) return data.status();
  if (data->has_value() && !(*data)->empty()) {
    std::string pem;
    if (!absl::Base64Unescape(**data, &pem)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", data_key, " is not base64"));
    }
    return pem;
  }
  absl::StatusOr<std::optional<std::string>> file = Scalar(map, key, where);
  if (!file.ok()) return file.status();
  if (!file->has_value() || (*file)->empty()) return std::string();
  absl::StatusOr<std::string> pem = ReadBounded(Resolve(dir, **file), what);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), absl::StrCat(where, ": ", pem.status().message()));
  }
  return pem;
}

absl::StatusOr<Kubeconfig> ResolveContext(const YAML::Node& root, const std::string& dir, const std::string& where,
                                   std::string_view wanted) {
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, " is not a kubeconfig (not a YAML map)"));
  Kubeconfig kc;
  kc.path = std::string(where);
  if (wanted.empty()) {
    absl::StatusOr<std::optional<std::string>> cur = Scalar(root, "current-context", where);
    if (!cur.ok()) return cur.status();
    if (!cur->has_value() || (*cur)->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has no current-context: name one (--context NAME)"));
    }
    kc.context = **cur;
  } else {
    kc.context = std::string(wanted);
  }
  absl::StatusOr<YAML::Node> ctx = Named(root, "contexts", "context", kc.context, where);
  if (!ctx.ok()) return ctx.status();
  absl::StatusOr<std::optional<std::string>> cluster_name = Scalar(*ctx, "cluster", where);
  absl::StatusOr<std::optional<std::string>> user_name = Scalar(*ctx, "user", where);
  absl::StatusOr<std::optional<std::string>> ns = Scalar(*ctx, "namespace", where);
  if (!cluster_name.ok()) return cluster_name.status();
  if (!user_name.ok()) return user_name.status();
  if (!ns.ok()) return ns.status();
  if (!cluster_name->has_value() || (*cluster_name)->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": context '", kc.context, "' names no cluster"));
  }
  kc.namespace_ = ns->value_or("");

  absl::StatusOr<YAML::Node> cluster = Named(root, "clusters", "cluster", **cluster_name, where);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::optional<std::string>> server = Scalar(*cluster, "server", where);
  if (!server.ok()) return server.status();
  if (!server->has_value() || (*server)->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cluster '", **cluster_name, "' has no server"));
  }
  kc.server = **server;
  absl::StatusOr<std::string> ca = Pem(*cluster, "certificate-authority", dir, where, "certificate authority");
  if (!ca.ok()) return ca.status();
  kc.ca_pem = *std::move(ca);
  absl::StatusOr<std::optional<std::string>> skip = Scalar(*cluster, "insecure-skip-tls-verify", where);
  if (!skip.ok()) return skip.status();
  if (skip->has_value()) {
    if (**skip == "true") {
      kc.insecure_skip_tls_verify = true;
    } else if (**skip != "false") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": insecure-skip-tls-verify is not true or false"));
    }
  }
  absl::StatusOr<std::optional<std::string>> sni = Scalar(*cluster, "tls-server-name", where);
  if (!sni.ok()) return sni.status();
  kc.tls_server_name = sni->value_or("");

  if (!user_name->has_value() || (*user_name)->empty()) return kc;  // anonymous
  absl::StatusOr<YAML::Node> user = Named(root, "users", "user", **user_name, where);
  if (!user.ok()) return user.status();
  absl::StatusOr<std::optional<std::string>> token = Scalar(*user, "token", where);
  if (!token.ok()) return token.status();
  kc.token = token->value_or("");
  if (kc.token.empty()) {
    absl::StatusOr<std::optional<std::string>> token_file = Scalar(*user, "tokenFile", where);
    if (!token_file.ok()) return token_file.status();
    if (token_file->has_value() && !(*token_file)->empty()) {
      absl::StatusOr<std::string> t = ReadBounded(Resolve(dir, **token_file), "token file");
      if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(where, ": ", t.status().message()));
      kc.token = std::string(absl::StripAsciiWhitespace(*t));
      if (kc.token.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": token file ", **token_file, " is empty"));
      }
    }
  }
  absl::StatusOr<std::string> cert = Pem(*user, "client-certificate", dir, where, "client certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = Pem(*user, "client-key", dir, where, "client key");
  if (!key.ok()) return key.status();
  kc.client_cert_pem = *std::move(cert);
  kc.client_key_pem = *std::move(key);
  if (kc.client_cert_pem.empty() != kc.client_key_pem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": user '", **user_name,
                                                   "' has a client certificate without its key or a key without "
                                                   "its certificate"));
  }
  if (kc.token.empty() && kc.client_cert_pem.empty()) {
    for (const char* unsupported : {"exec", "auth-provider", "username", "password"}) {
      if (user->operator[](unsupported).IsDefined()) {
        return absl::UnimplementedError(
            absl::StrCat(where, ": user '", **user_name, "' authenticates with '", unsupported,
                         "', which tether does not support (use a token, tokenFile or client certificate)"));
      }
    }
  }
  return kc;
}

}  // namespace

absl::StatusOr<std::string> DefaultKubeconfigPath() {
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    for (absl::string_view p : absl::StrSplit(env, ':', absl::SkipEmpty())) return std::string(p);
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return absl::NotFoundError("no kubeconfig: neither KUBECONFIG nor HOME is set (use --kubeconfig FILE)");
  }
  return absl::StrCat(home, "/.kube/config");
}

absl::StatusOr<Kubeconfig> ParseKubeconfig(std::string_view yaml, std::string_view dir_view,
                                           std::string_view where_view, std::string_view context) {
  const std::string dir(dir_view), where(where_view);
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    return ResolveContext(root, dir, where, context);
  } catch (const YAML::Exception& e) {
    // (The mark and the parser's own message: no content of the file.)
    return absl::InvalidArgumentError(absl::StrCat(where, " is not valid YAML (line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, "): ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " could not be read as a kubeconfig"));
  }
}

absl::StatusOr<Kubeconfig> LoadKubeconfig(const KubeconfigLoad& load) {
  std::string path = load.path;
  if (path.empty()) {
    absl::StatusOr<std::string> p = DefaultKubeconfigPath();
    if (!p.ok()) return p.status();
    path = *std::move(p);
  }
  absl::StatusOr<std::string> text = ReadBounded(path, "kubeconfig");
  if (!text.ok()) return text.status();
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  return ParseKubeconfig(*text, dir, path, load.context);
}

}  // namespace tether::k8s
