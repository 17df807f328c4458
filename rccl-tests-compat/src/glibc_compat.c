// Two glibc symbols newer than 2.28 that GCC 12's libstdc++.a names, for the benchmark the
// wheel ships (portable.sh, linked against glibc 2.28). Defined here, the static link resolves
// them to these instead of to glibc versions the oldest supported machines lack.
#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc 2.32: nonzero while the process has one thread; libstdc++ then skips atomic reference
// counts. 0 ("maybe several threads") is always correct, only a little slower.
char __libc_single_threaded = 0;

// glibc 2.36: std::random_device's default source. The kernel's random bytes (getrandom,
// Linux 3.17; a read of at most 256 bytes is whole), again when a signal interrupts it.
uint32_t arc4random(void) {
  uint32_t value = 0;
  long n;
  do {
    n = syscall(SYS_getrandom, &value, sizeof value, 0);
  } while (n < 0 && errno == EINTR);
  return value;
}
