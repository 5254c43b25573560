#include "supervisor/proc_scrub.h"

#include <cstring>

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
  // The strings to erase, in the order the kernel laid them out: the
  // arguments from argv[keep_args], then the environment.
  std::vector<char*> strings;
  for (int i = keep_args; i < argc; ++i) {
    if (argv[i] != nullptr) strings.push_back(argv[i]);
  }
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) strings.push_back(*e);
  if (strings.empty()) {
    environ = g_empty_environment;
    return;
  }
  // The contiguous block from the first string: each next string starts
  // right after the previous one's NUL.
  char* const begin = strings.front();
  char* end = begin + std::strlen(begin) + 1;
  std::vector<char*> elsewhere;
  for (std::size_t i = 1; i < strings.size(); ++i) {
    if (strings[i] == end) {
      end += std::strlen(end) + 1;
    } else {
      elsewhere.push_back(strings[i]);
    }
  }
  for (char* s : elsewhere) std::memset(s, 0, std::strlen(s));
  std::memset(begin, 0, static_cast<std::size_t>(end - begin));
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
