#include "host/native/kubernetes/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// One file of a (merged) kubeconfig: its YAML, the directory its relative
// paths resolve against, and its name in messages.
struct Doc {
  YAML::Node root;
  std::string dir, where;
};

// An entry found in a file: its inner map and that file.
struct Found {
  YAML::Node body;
  const Doc* doc;
};

// The `list` entry (clusters, users, contexts) called `name`, from the first
// file that has one (kubectl: the first file to set a name wins).
absl::StatusOr<Found> Named(const std::vector<Doc>& docs, const char* list, const char* inner, const std::string& name,
                            const std::string& where) {
  for (const Doc& d : docs) {
    const YAML::Node l = d.root[list];
    if (!l.IsDefined() || l.IsNull()) continue;  // (a missing key: an invalid node, whose type throws)
    if (!l.IsSequence()) return absl::InvalidArgumentError(absl::StrCat(d.where, ": '", list, "' is not a list"));
    for (const YAML::Node& e : l) {
      if (!e.IsMap()) continue;
      const YAML::Node n = e["name"];
      if (!n.IsScalar() || n.Scalar() != name) continue;
      const YAML::Node body = e[inner];
      if (!body.IsDefined() || body.IsNull()) return Found{YAML::Node(YAML::NodeType::Map), &d};
      if (!body.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat(d.where, ": ", list, " entry '", name, "' has no '", inner, "' map"));
      }
      return Found{body, &d};
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

absl::StatusOr<Kubeconfig> ResolveContext(const std::vector<Doc>& docs, const std::string& where,
                                          std::string_view wanted) {
  for (const Doc& d : docs) {
    if (!d.root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(d.where, " is not a kubeconfig (not a YAML map)"));
  }
  Kubeconfig kc;
  kc.path = where;
  if (wanted.empty()) {
    // The first file that names a current-context.
    for (const Doc& d : docs) {
      absl::StatusOr<std::optional<std::string>> cur = Scalar(d.root, "current-context", d.where);
      if (!cur.ok()) return cur.status();
      if (cur->has_value() && !(*cur)->empty()) {
        kc.context = **cur;
        break;
      }
    }
    if (kc.context.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no current-context: name one (--context NAME)"));
    }
  } else {
    kc.context = std::string(wanted);
  }
  absl::StatusOr<Found> ctx_found = Named(docs, "contexts", "context", kc.context, where);
  if (!ctx_found.ok()) return ctx_found.status();
  const YAML::Node& ctx = ctx_found->body;
  absl::StatusOr<std::optional<std::string>> cluster_name = Scalar(ctx, "cluster", ctx_found->doc->where);
  absl::StatusOr<std::optional<std::string>> user_name = Scalar(ctx, "user", ctx_found->doc->where);
  absl::StatusOr<std::optional<std::string>> ns = Scalar(ctx, "namespace", ctx_found->doc->where);
  if (!cluster_name.ok()) return cluster_name.status();
  if (!user_name.ok()) return user_name.status();
  if (!ns.ok()) return ns.status();
  if (!cluster_name->has_value() || (*cluster_name)->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx_found->doc->where, ": context '", kc.context, "' names no cluster"));
  }
  kc.namespace_ = ns->value_or("");

  absl::StatusOr<Found> cluster_found = Named(docs, "clusters", "cluster", **cluster_name, where);
  if (!cluster_found.ok()) return cluster_found.status();
  // (Paths and messages are those of the file the entry came from.)
  const YAML::Node* cluster = &cluster_found->body;
  std::string dir = cluster_found->doc->dir;
  std::string cwhere = cluster_found->doc->where;
  absl::StatusOr<std::optional<std::string>> server = Scalar(*cluster, "server", cwhere);
  if (!server.ok()) return server.status();
  if (!server->has_value() || (*server)->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cwhere, ": cluster '", **cluster_name, "' has no server"));
  }
  kc.server = **server;
  absl::StatusOr<std::string> ca = Pem(*cluster, "certificate-authority", dir, cwhere, "certificate authority");
  if (!ca.ok()) return ca.status();
  kc.ca_pem = *std::move(ca);
  absl::StatusOr<std::optional<std::string>> skip = Scalar(*cluster, "insecure-skip-tls-verify", cwhere);
  if (!skip.ok()) return skip.status();
  if (skip->has_value()) {
    if (**skip == "true") {
      kc.insecure_skip_tls_verify = true;
    } else if (**skip != "false") {
      return absl::InvalidArgumentError(absl::StrCat(cwhere, ": insecure-skip-tls-verify is not true or false"));
    }
  }
  absl::StatusOr<std::optional<std::string>> sni = Scalar(*cluster, "tls-server-name", cwhere);
  if (!sni.ok()) return sni.status();
  kc.tls_server_name = sni->value_or("");

  if (!user_name->has_value() || (*user_name)->empty()) return kc;  // anonymous
  absl::StatusOr<Found> user_found = Named(docs, "users", "user", **user_name, where);
  if (!user_found.ok()) return user_found.status();
  const YAML::Node* user = &user_found->body;
  dir = user_found->doc->dir;
  const std::string uwhere = user_found->doc->where;
  absl::StatusOr<std::optional<std::string>> token = Scalar(*user, "token", uwhere);
  if (!token.ok()) return token.status();
  kc.token = token->value_or("");
  if (kc.token.empty()) {
    absl::StatusOr<std::optional<std::string>> token_file = Scalar(*user, "tokenFile", uwhere);
    if (!token_file.ok()) return token_file.status();
    if (token_file->has_value() && !(*token_file)->empty()) {
      absl::StatusOr<std::string> t = ReadBounded(Resolve(dir, **token_file), "token file");
      if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(uwhere, ": ", t.status().message()));
      kc.token = std::string(absl::StripAsciiWhitespace(*t));
      if (kc.token.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(uwhere, ": token file ", **token_file, " is empty"));
      }
    }
  }
  absl::StatusOr<std::string> cert = Pem(*user, "client-certificate", dir, uwhere, "client certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = Pem(*user, "client-key", dir, uwhere, "client key");
  if (!key.ok()) return key.status();
  kc.client_cert_pem = *std::move(cert);
  kc.client_key_pem = *std::move(key);
  if (kc.client_cert_pem.empty() != kc.client_key_pem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(uwhere, ": user '", **user_name,
                                                   "' has a client certificate without its key or a key without "
                                                   "its certificate"));
  }
  if (kc.token.empty() && kc.client_cert_pem.empty()) {
    for (const char* unsupported : {"exec", "auth-provider", "username", "password"}) {
      if (user->operator[](unsupported).IsDefined()) {
        return absl::UnimplementedError(
            absl::StrCat(uwhere, ": user '", **user_name, "' authenticates with '", unsupported,
                         "', which tether does not support (use a token, tokenFile or client certificate)"));
      }
    }
  }
  return kc;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> DefaultKubeconfigPaths() {
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    std::vector<std::string> paths;
    for (absl::string_view p : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      if (std::find(paths.begin(), paths.end(), std::string(p)) == paths.end()) paths.emplace_back(p);
    }
    if (!paths.empty()) return paths;
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return absl::NotFoundError("no kubeconfig: neither KUBECONFIG nor HOME is set (use --kubeconfig FILE)");
  }
  return std::vector<std::string>{absl::StrCat(home, "/.kube/config")};
}

absl::StatusOr<Kubeconfig> ParseKubeconfigs(const std::vector<KubeconfigText>& files, std::string_view context) {
  if (files.empty()) return absl::InvalidArgumentError("no kubeconfig to read");
  std::vector<Doc> docs;
  std::string where;
  for (const KubeconfigText& f : files) {
    absl::StrAppend(&where, where.empty() ? "" : ", ", f.where);
    try {
      docs.push_back(Doc{YAML::Load(f.text), f.dir, f.where});
    } catch (const YAML::Exception& e) {
      // (The mark and the parser's own message: no content of the file.)
      return absl::InvalidArgumentError(absl::StrCat(f.where, " is not valid YAML (line ", e.mark.line + 1,
                                                     ", column ", e.mark.column + 1, "): ", e.msg));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(f.where, " could not be read as a kubeconfig"));
    }
  }
  if (files.size() > 1) where = absl::StrCat("the kubeconfig files ", where);
  try {
    return ResolveContext(docs, where, context);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " could not be read as a kubeconfig"));
  }
}

absl::StatusOr<Kubeconfig> ParseKubeconfig(std::string_view yaml, std::string_view dir, std::string_view where,
                                           std::string_view context) {
  return ParseKubeconfigs({KubeconfigText{std::string(yaml), std::string(dir), std::string(where)}}, context);
}

absl::StatusOr<Kubeconfig> LoadKubeconfig(const KubeconfigLoad& load) {
  std::vector<std::string> paths;
  const bool listed = load.path.empty();
  if (listed) {
    absl::StatusOr<std::vector<std::string>> p = DefaultKubeconfigPaths();
    if (!p.ok()) return p.status();
    paths = *std::move(p);
  } else {
    paths.push_back(load.path);
  }
  std::vector<KubeconfigText> files;
  for (const std::string& path : paths) {
    absl::StatusOr<std::string> text = ReadBounded(path, "kubeconfig");
    // Of a KUBECONFIG list, files that do not exist are skipped (as kubectl
    // does); a file named alone must exist.
    if (!text.ok() && absl::IsNotFound(text.status()) && listed && paths.size() > 1) continue;
    if (!text.ok()) return text.status();
    const std::size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    files.push_back(KubeconfigText{*std::move(text), std::move(dir), path});
  }
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no kubeconfig: none of the files KUBECONFIG lists exists (", absl::StrJoin(paths, ":"), ")"));
  }
  return ParseKubeconfigs(files, load.context);
}

}  // namespace tether::k8s
