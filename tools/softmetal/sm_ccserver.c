/* SPDX-License-Identifier: MIT */
/* The compiler server: preloaded into the C++ compiler (LD_PRELOAD), never
 * linked into softmetal. softmetal embeds this text, compiles it with the
 * kernel compiler into its cache (cs-<key>.so) and starts the compiler
 * once with it (sm_spawn.c). A start of clang costs about 20 ms before any
 * work (relocating libLLVM and libclang-cpp, their constructors), and a
 * library and a pipeline of a small kernel run the compiler three times.
 * Here the compiler stops before main, with every library loaded and
 * constructed, and serves: each request on the socket is a command line,
 * which a fork of this process runs as the compiler's own main would.
 *
 * Protocol (SOCK_SEQPACKET, one message each way):
 *   server -> client, once: "softmetal-ccserver 1\n" when ready.
 *   client -> server: "argc\0arg0\0arg1\0...", with three descriptors
 *     (SCM_RIGHTS): the working directory, the log (stdout and stderr),
 *     and the write end of a pipe that gets, when the command ends, two
 *     long longs: its wait status and the CPU microseconds it used;
 *     closed without them if the server fails.
 * The server ends when every client end of the socket is closed, killing
 * the commands still running (nobody waits for them). The compiler's
 * environment is the client's when it started the server, less
 * LD_PRELOAD and the variables that started it. Only the program named by
 * SOFTMETAL_CCSERVER_EXE serves: a wrapper script's shell, or a compiler
 * that another program runs, closes the socket and runs as it would. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                        void *);

enum { MAX_MESSAGE = 65536, MAX_ARGS = 1024, MAX_JOBS = 256 };

typedef struct {
  pid_t pid;
  int reply;
} job;

static char message[MAX_MESSAGE + 1];
static char *args[MAX_ARGS + 1];
static job jobs[MAX_JOBS];
static int njobs;

static void finish(pid_t pid, int status, const struct rusage *ru) {
  long long reply[2] = {status, (long long)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000 +
                                    ru->ru_utime.tv_usec + ru->ru_stime.tv_usec};
  for (int i = 0; i < njobs; i++) {
    if (jobs[i].pid != pid) continue;
    ssize_t w;
    do w = write(jobs[i].reply, reply, sizeof reply);
    while (w < 0 && errno == EINTR);
    close(jobs[i].reply);
    jobs[i] = jobs[--njobs];
    return;
  }
}

static void reap(int flags) {
  int status;
  pid_t pid;
  struct rusage ru;
  while ((pid = wait4(-1, &status, flags, &ru)) > 0) {
    finish(pid, status, &ru);
    if (flags == 0) return;
  }
}

/* Receives one request. Returns argc (> 0) with fds[3] open, 0 at the end
 * of the stream, -1 for a message to drop. */
static int receive(int sock, int fds[3]) {
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(3 * sizeof(int))];
  } control;
  struct iovec iov = {message, MAX_MESSAGE};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control.b;
  m.msg_controllen = sizeof control.b;
  ssize_t n;
  do n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return 0;
  int got = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int *p = (int *)CMSG_DATA(c);
    for (int i = 0; i < k; i++) {
      if (got < 3) fds[got++] = p[i];
      else close(p[i]);
    }
  }
  message[n] = 0;
  int argc = atoi(message), a = 0;
  char *p = message + strlen(message) + 1, *end = message + n;
  while (a < argc && a < MAX_ARGS && p < end) {
    args[a++] = p;
    p += strlen(p) + 1;
  }
  args[a] = NULL;
  if (got == 3 && argc > 0 && a == argc && (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0)
    return argc;
  for (int i = 0; i < got; i++) close(fds[i]);
  return -1;
}

/* Serves until the clients are gone (then exits) or, in a child, returns
 * the command's argc with args[] set up for main. */
static int serve(int sock, const sigset_t *old_mask) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  struct sigaction ignore = {0}, pipe_action;
  ignore.sa_handler = SIG_IGN; /* a client gone before its reply */
  sigaction(SIGPIPE, &ignore, &pipe_action);
  static const char hello[] = "softmetal-ccserver 1\n";
  if (sfd < 0 || send(sock, hello, sizeof hello - 1, MSG_NOSIGNAL) < 0) _exit(1);
  for (;;) {
    struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      reap(WNOHANG);
    }
    if (!p[0].revents) continue;
    int fds[3];
    int argc = receive(sock, fds);
    if (argc == 0) break;
    if (argc < 0) continue;
    while (njobs == MAX_JOBS) reap(0);
    pid_t pid = fork();
    if (pid == 0) {
      close(sock);
      close(sfd);
      for (int i = 0; i < njobs; i++) close(jobs[i].reply);
      sigaction(SIGPIPE, &pipe_action, NULL);
      sigprocmask(SIG_SETMASK, old_mask, NULL);
      close(fds[2]);
      if (fchdir(fds[0]) != 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0) _exit(127);
      close(fds[0]);
      close(fds[1]);
      return argc;
    }
    close(fds[0]);
    close(fds[1]);
    if (pid < 0) {
      close(fds[2]); /* no status: the client runs the command itself */
      continue;
    }
    jobs[njobs++] = (job){pid, fds[2]};
  }
  for (int i = 0; i < njobs; i++) kill(jobs[i].pid, SIGKILL);
  while (njobs > 0) reap(0);
  _exit(0);
}

/* glibc's entry to main, which the program's _start calls: the server
 * takes its place and calls it in each command's fork. */
int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end);
int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
  void *sym = dlsym(RTLD_NEXT, "__libc_start_main");
  start_fn start;
  if (!sym) _exit(127);
  memcpy(&start, &sym, sizeof start);
  const char *fd_text = getenv("SOFTMETAL_CCSERVER_FD");
  const char *exe = getenv("SOFTMETAL_CCSERVER_EXE");
  char self[4096], want[4096];
  /* only the compiler itself serves: not the shell of a wrapper script,
   * whose commands would need the script's name before their arguments */
  bool serve_here = fd_text && *fd_text && exe && realpath("/proc/self/exe", self) &&
                    realpath(exe, want) && strcmp(self, want) == 0;
  int sock = fd_text ? atoi(fd_text) : -1;
  /* what the program starts gets none of this */
  unsetenv("LD_PRELOAD");
  unsetenv("SOFTMETAL_CCSERVER_FD");
  unsetenv("SOFTMETAL_CCSERVER_EXE");
  if (!serve_here && sock >= 0) close(sock); /* the client sees the end: no server */
  if (serve_here) {
    fcntl(sock, F_SETFD, FD_CLOEXEC);
    sigset_t old_mask;
    sigprocmask(SIG_SETMASK, NULL, &old_mask);
    argc = serve(sock, &old_mask);
    argv = args;
  }
  return start(main, argc, argv, init, fini, rtld_fini, stack_end);
}
