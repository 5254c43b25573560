// A preload library for tests (tests/lib/exit_handlers.sh): records which
// functions a program registers to run at exit. glibc's atexit() in an
// executable is a static stub that calls libc's __cxa_atexit, which this
// interposes. The function watched is OPENSSL_cleanup, which OpenSSL
// registers on its first use: found by name in a shared libcrypto, or by
// its offset in the executable (`nm`) when OpenSSL is linked in. Every
// registration of it is appended to $TETHER_ATEXIT_LOG as "watched", every
// other one as "other", so that a log with no line at all says the watch
// was not in place.
//
//   [TETHER_ATEXIT_WATCH=0x<offset>] TETHER_ATEXIT_LOG=FILE LD_PRELOAD=libatexit_watch.so PROGRAM
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int first_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  *(uintptr_t*)data = info->dlpi_addr;  // the executable comes first
  return 1;
}

static void note(const char* what) {
  const char* path = getenv("TETHER_ATEXIT_LOG");
  if (path == NULL) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  (void)!write(fd, what, strlen(what));
  close(fd);
}

int __cxa_atexit(void (*fn)(void*), void* arg, void* dso) {
  static int (*real)(void (*)(void*), void*, void*);
  if (real == NULL) real = (int (*)(void (*)(void*), void*, void*))dlsym(RTLD_NEXT, "__cxa_atexit");
  const char* watch = getenv("TETHER_ATEXIT_WATCH");
  uintptr_t base = 0;
  dl_iterate_phdr(first_object, &base);
  Dl_info info;
  const int named = dladdr((void*)fn, &info) != 0 && info.dli_sname != NULL &&
                    strcmp(info.dli_sname, "OPENSSL_cleanup") == 0;
  if (named || (watch != NULL && (uintptr_t)fn == base + (uintptr_t)strtoull(watch, NULL, 16))) {
    note("watched\n");
  } else {
    note("other\n");
  }
  return real(fn, arg, dso);
}
