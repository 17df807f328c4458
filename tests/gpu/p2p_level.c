// The stock library's reading of NCCL_P2P_LEVEL (issue 49): for each value given, a one-rank
// communicator made with NCCL_P2P_LEVEL set to it and NCCL_DEBUG=INFO, in a child process (NCCL
// reads the variable once per process); stock's INFO line "NCCL_P2P_LEVEL set by environment
// to X" says the level it took. Prints one line per value, `value<TAB>level` (`none`: no such
// line, NCCL's default stays), for src/topo.rs's test (tests/data/nccl-p2p-levels.tsv).
//
//   cc -O1 -o p2p_level tests/gpu/p2p_level.c -ldl
//   ./p2p_level /path/to/libnccl.so.2 LOC NVL 3 bogus ...   (on a machine with a GPU)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*InitAll)(void** comms, int ndev, const int* devlist);
typedef int (*Destroy)(void* comm);

static int child(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW);
  if (!h) return fprintf(stderr, "%s\n", dlerror()), 2;
  InitAll init = (InitAll)dlsym(h, "ncclCommInitAll");
  Destroy destroy = (Destroy)dlsym(h, "ncclCommDestroy");
  if (!init || !destroy) return 3;
  void* comm = NULL;
  int dev = 0;
  if (init(&comm, 1, &dev) != 0) return 4;
  return destroy(comm) != 0 ? 5 : 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return fprintf(stderr, "usage: %s LIBNCCL VALUE...\n", argv[0]), 2;
  for (int i = 2; i < argc; i++) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      setenv("NCCL_P2P_LEVEL", argv[i], 1);
      setenv("NCCL_DEBUG", "INFO", 1);
      setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
      unsetenv("NCCL_P2P_DISABLE");
      _exit(child(argv[1]));
    }
    close(fds[1]);
    char buf[4096], level[32] = "none";
    FILE* f = fdopen(fds[0], "r");
    while (fgets(buf, sizeof buf, f)) {
      const char* at = strstr(buf, "NCCL_P2P_LEVEL set by environment to ");
      if (at) sscanf(at + strlen("NCCL_P2P_LEVEL set by environment to "), "%31s", level);
    }
    fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "%s: the one-rank communicator failed (status %d)\n", argv[i], status);
      return 1;
    }
    printf("%s\t%s\n", argv[i], level);
  }
  return 0;
}
