/* dlsym check: dlopen(argv[1]) and look up every symbol name read from stdin (one a line).
 * Prints `missing NAME` for each name dlsym cannot find and `found N` at the end.
 * Exit status: 0 when every name resolved, 1 when some did not, 2 when dlopen failed.
 * Driven by tests/symbols.rs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <library> < names\n", argv[0]);
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  char line[512];
  int found = 0, missing = 0;
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0]) continue;
    if (dlsym(h, line)) {
      found++;
    } else {
      printf("missing %s\n", line);
      missing++;
    }
  }
  printf("found %d\n", found);
  return missing ? 1 : 0;
}
