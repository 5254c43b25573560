#include "host/native/docker/docker_options.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "host/support/typed_provider.h"
#include "tether/providers/docker.h"

namespace tether {

DockerTls DockerTlsFromEnvironment() {
  DockerTls t;
  const char* verify = std::getenv("DOCKER_TLS_VERIFY");
  t.verify = verify != nullptr && *verify != '\0';
  const char* path = std::getenv("DOCKER_CERT_PATH");
  if (path != nullptr && *path != '\0') {
    t.cert_path = path;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    t.cert_path = absl::StrCat(home, "/.docker");
  }
  return t;
}

ProviderInfo DockerProvider() {
  using O = DockerOptions;  // TLS settings and certificates: DOCKER_TLS_VERIFY, DOCKER_CERT_PATH only
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "docker",
      "a container through the Docker Engine API (Docker, or podman's\n"
      "`podman system service`); the engine from --endpoint, else $DOCKER_HOST,\n"
      "else unix:///var/run/docker.sock; TLS from DOCKER_TLS_VERIFY and\n"
      "DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem)",
      {{"--container", "the container's name or id, required", internal::Into(&O::container), "--container NAME|ID"},
       {"--endpoint", "the API's URL: unix:///path, tcp://host:port, https://host:port", internal::Into(&O::endpoint)},
       {"--ca-file", "a PEM CA to trust for the API's TLS certificate", internal::Into(&O::ca_file)}},
      MakeDockerTransport});
}

}  // namespace tether
