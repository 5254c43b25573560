#include "supervisor/proc_scrub.h"

#include <cstring>

#include "protocol/command_line.h"

extern char** environ;

namespace tether::supervisor {
namespace {

char* g_empty_environment[] = {nullptr};

}  // namespace

std::vector<std::string> CopyEnvironment(char** envp) {
  std::vector<std::string> out;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

void ScrubProcessStrings(int argc, char** argv, int keep_args, char** envp) {
  // Each string is zeroed where it lies; its NUL stays, so what /proc shows
  // keeps its length. The arguments from argv[keep_args], then the whole
  // environment but the exec tag (not a secret: the transport's way to find
  // this process again).
  for (int i = keep_args; i < argc; ++i) {
    if (argv[i] != nullptr) std::memset(argv[i], 0, std::strlen(argv[i]));
  }
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (!protocol::IsExecTag(*e)) std::memset(*e, 0, std::strlen(*e));
  }
  environ = g_empty_environment;
}

void EraseStrings(std::vector<std::string>* strings) {
  for (std::string& s : *strings) {
    // volatile: the stores must happen although the string dies right after.
    volatile char* p = s.data();
    for (std::size_t i = 0; i < s.size(); ++i) p[i] = 0;
  }
  strings->clear();
  strings->shrink_to_fit();
}

}  // namespace tether::supervisor
