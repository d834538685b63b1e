/* SPDX-License-Identifier: MIT */
/* The compiler server: preloaded into the C++ compiler (LD_PRELOAD), never
 * linked into softmetal. softmetal embeds this text, compiles it with the
 * kernel compiler into its cache (cs-<key>.so) and starts the compiler
 * once with it (sm_spawn.c). A start of clang costs 20-100 ms before any
 * work (relocating libLLVM and libclang-cpp, their constructors, thousands
 * of page faults), and a library and a pipeline of a small kernel run the
 * compiler three times. Here the compiler stops before main, with every
 * library loaded and constructed, and serves.
 *
 * Workers. The server forks workers; a worker runs commands one after
 * another in its own process, each as the compiler's own main, so that
 * the second command finds the code paged in and the first one's freed
 * memory in the heap (a fork per command wrote 1500-2100 pages each, and
 * a page fault can cost 10-30 us on a virtual machine). Three things of
 * clang's would forbid a second main in one process, and are replaced
 * here:
 *   - llvm::InitLLVM's destructor calls llvm_shutdown(), which destroys
 *     the option registry: a worker constructs one InitLLVM, its own, at
 *     its first command, and main's own are empty;
 *   - cc1 runs with -disable-free, leaking each unit's AST and code: a
 *     worker's CompilerInvocation::CreateFromArgs drops the flag;
 *   - LLVM's -mllvm options are global: a worker serves only commands with
 *     the -mllvm values of its first one.
 * A command ends its worker (which then exits as the compiler would) when
 * it fails, when it writes to standard output (clang buffers that until
 * exit), when the compiler did not call the replacements above (another
 * clang: each command then costs a fork, as before), or when the worker
 * holds more than WORKER_RSS_MAX. The server forks another for the next.
 *
 * Protocol with the client (SOCK_SEQPACKET, one message each way):
 *   server -> client, once: "softmetal-ccserver 2\n" when ready.
 *   client -> server: "argc\0arg0\0arg1\0...", with three descriptors
 *     (SCM_RIGHTS): the working directory, the log (stdout and stderr),
 *     and the write end of a pipe that gets, when the command ends, three
 *     long longs: its wait status, the CPU microseconds it used, and 1 if
 *     a worker was forked for it (else 0); closed without them if the
 *     server fails.
 * Between the server and a worker (a socketpair each): the same message
 * with the first two descriptors; the worker answers {0, CPU us} when the
 * command succeeded and it goes on, or exits with the command's status.
 * The server ends when every client end of the socket is closed, killing
 * its workers (nobody waits for their commands). The compiler's
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
#include <stdio.h>
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

enum { MAX_MESSAGE = 65536, MAX_ARGS = 1024, MAX_WORKERS = 64, MAX_SIGNATURE = 4096 };
#define WORKER_RSS_MAX (1024LL << 20)

typedef struct {
  pid_t pid;
  int sock;           /* the server's end of the worker's socketpair; -1 once it closed */
  int reply;          /* the running command's reply pipe; -1 when idle */
  bool forked_for_it; /* the running command is the worker's first */
  long long cpu_reported;
  char signature[MAX_SIGNATURE]; /* its first command's -mllvm values */
} worker;

static char message[MAX_MESSAGE + 1];
static size_t message_len;
static char *args[MAX_ARGS + 1];
static worker workers[MAX_WORKERS];
static int nworkers;

/* ------------------------------------------------------------ messages */
static long long cpu_us(const struct rusage *ru) {
  return (long long)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000 + ru->ru_utime.tv_usec +
         ru->ru_stime.tv_usec;
}

static void write_all(int fd, const void *p, size_t n) {
  ssize_t w;
  do w = write(fd, p, n);
  while (w < 0 && errno == EINTR);
}

/* One buffer, with room for descriptors. */
static struct msghdr message_header(struct iovec *iov, void *control, size_t control_len) {
  struct msghdr m = {0};
  m.msg_iov = iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = control_len;
  return m;
}

/* Receives one request with up to want descriptors into message, args and
 * fds. Returns argc (> 0) with the descriptors open, 0 at the end of the
 * stream, -1 for a message to drop. */
static int receive(int sock, int *fds, int want) {
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(3 * sizeof(int))];
  } control;
  struct iovec iov = {message, MAX_MESSAGE};
  struct msghdr m = message_header(&iov, control.b, sizeof control.b);
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
      if (got < want)
        fds[got++] = p[i];
      else
        close(p[i]);
    }
  }
  message[n] = 0;
  message_len = (size_t)n;
  int argc = atoi(message), a = 0;
  char *p = message + strlen(message) + 1, *end = message + n;
  while (a < argc && a < MAX_ARGS && p < end) {
    args[a++] = p;
    p += strlen(p) + 1;
  }
  args[a] = NULL;
  if (got == want && argc > 0 && a == argc && (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0)
    return argc;
  for (int i = 0; i < got; i++) close(fds[i]);
  return -1;
}

/* The values of the -mllvm options in a command line, joined. */
static void mllvm_signature(const char *const *argv, char out[MAX_SIGNATURE]) {
  size_t n = 0;
  out[0] = 0;
  for (int i = 0; argv[i]; i++) {
    if (strcmp(argv[i], "-mllvm") != 0 || !argv[i + 1]) continue;
    size_t k = strlen(argv[++i]);
    if (n + k + 2 > MAX_SIGNATURE) {
      snprintf(out, MAX_SIGNATURE, "\1too long");
      return;
    }
    memcpy(out + n, argv[i], k);
    out[n + k] = '\n';
    n += k + 1;
    out[n] = 0;
  }
}

/* ------------------------------------------------------ in the worker */
static int g_sock = -1; /* the worker's end of its socketpair */
static main_fn g_main;
static bool g_in_worker;
static bool g_init_done;     /* the worker's own InitLLVM is constructed */
static bool g_shutdown_kept; /* this command's InitLLVM went through here */
static bool g_mllvm_changed; /* this command's cc1 -mllvm differ from the first's */
static char g_cc1_signature[MAX_SIGNATURE];
static bool g_cc1_signature_set;

/* One llvm::InitLLVM per worker, constructed at the first command's and
 * never destroyed; main's own are empty. Its arguments are what a crash
 * report prints as the program's. */
static _Alignas(64) unsigned char g_init_llvm[4096];
static int g_init_argc = 1;
static const char *g_init_argv_text[] = {"clang (softmetal compiler server worker)", NULL};
static const char **g_init_argv = g_init_argv_text;

typedef void (*init_ctor_fn)(void *, int *, const char ***, bool);
typedef void (*init_dtor_fn)(void *);
static void *next_symbol(const char *name) { return dlsym(RTLD_NEXT, name); }

#define INIT_LLVM_CTOR _ZN4llvm8InitLLVMC2ERiRPPKcb
#define INIT_LLVM_DTOR _ZN4llvm8InitLLVMD1Ev
#define CREATE_FROM_ARGS                                                                           \
  _ZN5clang18CompilerInvocation14CreateFromArgsERS0_N4llvm8ArrayRefIPKcEERNS_17DiagnosticsEngineES5_
#define NAME_OF(s) NAME_OF_(s)
#define NAME_OF_(s) #s

void INIT_LLVM_CTOR(void *self, int *argc, const char ***argv, bool pipe_handler);
void INIT_LLVM_CTOR(void *self, int *argc, const char ***argv, bool pipe_handler) {
  void *sym = next_symbol(NAME_OF(INIT_LLVM_CTOR));
  init_ctor_fn ctor;
  if (!sym) abort();
  memcpy(&ctor, &sym, sizeof ctor);
  if (!g_in_worker) {
    ctor(self, argc, argv, pipe_handler);
    return;
  }
  if (!g_init_done) ctor(g_init_llvm, &g_init_argc, &g_init_argv, pipe_handler);
  g_init_done = true;
}

void INIT_LLVM_DTOR(void *self);
void INIT_LLVM_DTOR(void *self) {
  if (g_in_worker && g_init_done) { /* main's own: empty (above) */
    g_shutdown_kept = true;
    return;
  }
  void *sym = next_symbol(NAME_OF(INIT_LLVM_DTOR));
  init_dtor_fn dtor;
  if (!sym) abort();
  memcpy(&dtor, &sym, sizeof dtor);
  dtor(self);
}

/* bool CompilerInvocation::CreateFromArgs(CompilerInvocation &,
 * ArrayRef<const char *>, DiagnosticsEngine &, const char *): the array
 * reference is a pointer and a size in two registers on x86-64 and
 * aarch64. */
typedef bool (*create_fn)(void *, const char *const *, size_t, void *, const char *);
bool CREATE_FROM_ARGS(void *inv, const char *const *argv, size_t argc, void *diags,
                      const char *argv0);
bool CREATE_FROM_ARGS(void *inv, const char *const *argv, size_t argc, void *diags,
                      const char *argv0) {
  void *sym = next_symbol(NAME_OF(CREATE_FROM_ARGS));
  create_fn create;
  if (!sym) abort();
  memcpy(&create, &sym, sizeof create);
  if (!g_in_worker || argc > MAX_ARGS) return create(inv, argv, argc, diags, argv0);
  const char *kept[MAX_ARGS + 1];
  size_t k = 0;
  for (size_t i = 0; i < argc; i++)
    if (strcmp(argv[i], "-disable-free") != 0) kept[k++] = argv[i];
  kept[k] = NULL;
  char signature[MAX_SIGNATURE];
  mllvm_signature(kept, signature);
  if (!g_cc1_signature_set) {
    memcpy(g_cc1_signature, signature, sizeof signature);
    g_cc1_signature_set = true;
  } else if (strcmp(signature, g_cc1_signature) != 0) {
    g_mllvm_changed = true;
  }
  return create(inv, kept, k, diags, argv0);
}

static long long resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%lld %lld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}

/* Whether the command's outputs are all files (-o) or diagnostics (stderr,
 * unbuffered): then nothing of it waits in a buffer until exit. */
static bool writes_no_stdout(char *const *argv) {
  for (int i = 1; argv[i]; i++) {
    if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "-fsyntax-only") == 0 ||
        strcmp(argv[i], "-###") == 0)
      return true;
  }
  return false;
}

/* The worker's main (glibc's start calls it once): serves commands from
 * the server until one ends it or the server is gone. */
static int worker_main(int argc0, char **argv0, char **envp) {
  (void)argc0, (void)argv0;
  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  for (;;) {
    int fds[2];
    int argc = receive(g_sock, fds, 2);
    if (argc == 0) _exit(0);
    if (argc < 0) _exit(127);
    if (fchdir(fds[0]) != 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0) _exit(127);
    close(fds[0]);
    close(fds[1]);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    g_shutdown_kept = false;
    g_mllvm_changed = false;
    bool quiet = writes_no_stdout(args);
    int rc = g_main(argc, args, envp);
    if (rc != 0 || !quiet || !g_shutdown_kept || g_mllvm_changed ||
        resident_bytes() > WORKER_RSS_MAX)
      exit(rc); /* as the compiler ends; the server reports the status */
    getrusage(RUSAGE_SELF, &r1);
    long long done[2] = {0, cpu_us(&r1) - cpu_us(&r0)};
    if (null_fd >= 0) { /* the log is the client's: let it go */
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    if (send(g_sock, done, sizeof done, MSG_NOSIGNAL) != (ssize_t)sizeof done) _exit(0);
  }
}

/* ------------------------------------------------------ in the server */
static void reply_to(worker *w, long long status, long long cpu) {
  long long reply[3] = {status, cpu, w->forked_for_it};
  write_all(w->reply, reply, sizeof reply);
  close(w->reply);
  w->reply = -1;
  w->forked_for_it = false;
}

static void drop_worker(int i) {
  if (workers[i].sock >= 0) close(workers[i].sock);
  if (workers[i].reply >= 0) close(workers[i].reply);
  workers[i] = workers[--nworkers];
}

/* Collects ended workers; a worker that ended in a command answers it with
 * its wait status. flags: WNOHANG, or 0 to wait for one. */
static void reap(int flags) {
  int status;
  pid_t pid;
  struct rusage ru;
  while ((pid = wait4(-1, &status, flags, &ru)) > 0) {
    for (int i = 0; i < nworkers; i++) {
      if (workers[i].pid != pid) continue;
      if (workers[i].reply >= 0)
        reply_to(&workers[i], status, cpu_us(&ru) - workers[i].cpu_reported);
      drop_worker(i);
      break;
    }
    if (flags == 0) return;
  }
}

/* An idle worker for the -mllvm values in signature, or -1. */
static int idle_worker(const char *signature) {
  for (int i = 0; i < nworkers; i++)
    if (workers[i].reply < 0 && workers[i].sock >= 0 &&
        strcmp(workers[i].signature, signature) == 0)
      return i;
  return -1;
}

/* Hands the message just received to a worker: fds are the working
 * directory, the log and the reply pipe. In a new worker's child, returns
 * true (the caller goes on to the worker's main); else false. */
static bool dispatch(int client, int sfd, const sigset_t *old_mask,
                     const struct sigaction *pipe_action, int fds[3]) {
  char signature[MAX_SIGNATURE];
  mllvm_signature((const char *const *)args, signature);
  int i = idle_worker(signature);
  if (i < 0 && nworkers < MAX_WORKERS) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0) {
      pid_t pid = fork();
      if (pid == 0) {
        close(client);
        close(sfd);
        close(sv[0]);
        for (int k = 0; k < 3; k++) close(fds[k]);
        for (int k = 0; k < nworkers; k++) {
          if (workers[k].sock >= 0) close(workers[k].sock);
          if (workers[k].reply >= 0) close(workers[k].reply);
        }
        sigaction(SIGPIPE, pipe_action, NULL);
        sigprocmask(SIG_SETMASK, old_mask, NULL);
        g_sock = sv[1];
        g_in_worker = true;
        return true;
      }
      close(sv[1]);
      if (pid > 0) {
        i = nworkers++;
        workers[i] = (worker){.pid = pid, .sock = sv[0], .reply = -1, .forked_for_it = true};
        memcpy(workers[i].signature, signature, sizeof signature);
      } else {
        close(sv[0]);
      }
    }
  }
  bool sent = false;
  if (i >= 0) {
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(2 * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {message, message_len};
    struct msghdr m = message_header(&iov, control.b, sizeof control.b);
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(h), fds, 2 * sizeof(int));
    ssize_t w;
    do w = sendmsg(workers[i].sock, &m, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    sent = w == (ssize_t)message_len;
  }
  close(fds[0]);
  close(fds[1]);
  if (sent)
    workers[i].reply = fds[2];
  else
    close(fds[2]); /* no status: the client runs the command itself */
  return false;
}

/* Serves until the clients are gone (then exits) or, in a new worker,
 * returns. */
static void serve(int sock, const sigset_t *old_mask) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  struct sigaction ignore = {0}, pipe_action;
  ignore.sa_handler = SIG_IGN; /* a client gone before its reply */
  sigaction(SIGPIPE, &ignore, &pipe_action);
  static const char hello[] = "softmetal-ccserver 2\n";
  if (sfd < 0 || send(sock, hello, sizeof hello - 1, MSG_NOSIGNAL) < 0) _exit(1);
  for (;;) {
    struct pollfd p[2 + MAX_WORKERS];
    int n = 0;
    p[n++] = (struct pollfd){sfd, POLLIN, 0};
    /* a new request only while a worker can take it */
    bool room = nworkers < MAX_WORKERS;
    for (int i = 0; i < nworkers && !room; i++) room = workers[i].reply < 0;
    p[n++] = (struct pollfd){room ? sock : -1, POLLIN, 0};
    for (int i = 0; i < nworkers; i++) p[n++] = (struct pollfd){workers[i].sock, POLLIN, 0};
    if (poll(p, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = nworkers - 1; i >= 0; i--) { /* p[2 + i]: workers not yet reaped */
      if (!p[2 + i].revents) continue;
      long long done[2];
      ssize_t r = recv(workers[i].sock, done, sizeof done, 0);
      if (r == (ssize_t)sizeof done && workers[i].reply >= 0) {
        workers[i].cpu_reported += done[1];
        reply_to(&workers[i], done[0], done[1]);
      } else if (r <= 0) { /* ending: reap() answers for it */
        close(workers[i].sock);
        workers[i].sock = -1;
      }
    }
    if (p[0].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      reap(WNOHANG);
    }
    if (!p[1].revents) continue;
    int fds[3];
    int argc = receive(sock, fds, 3);
    if (argc == 0) break;
    if (argc < 0) continue;
    if (dispatch(sock, sfd, old_mask, &pipe_action, fds)) return;
  }
  for (int i = 0; i < nworkers; i++) kill(workers[i].pid, SIGKILL);
  while (nworkers > 0) reap(0);
  _exit(0);
}

/* glibc's entry to main, which the program's _start calls: the server
 * takes its place, and a worker calls it with worker_main for main. */
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
  if (!serve_here) return start(main, argc, argv, init, fini, rtld_fini, stack_end);
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  sigset_t old_mask;
  sigprocmask(SIG_SETMASK, NULL, &old_mask);
  serve(sock, &old_mask); /* returns in a new worker */
  g_main = main;
  return start(worker_main, argc, argv, init, fini, rtld_fini, stack_end);
}
