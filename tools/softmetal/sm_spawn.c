/* SPDX-License-Identifier: MIT */
/* Running the compiler and the linker: a command goes to the compiler
 * server (sm_ccserver.c) when one runs for its program, else to a new
 * process. The server is the compiler started once, stopped before its
 * main with sm_ccserver.c preloaded; its workers run commands in-process,
 * one after another, without a start of clang each (20-100 ms of loading,
 * relocating libLLVM and faulting pages in). */
#define _GNU_SOURCE /* pipe2, MSG_CMSG_CLOEXEC */
#include "sm_internal.h"
#include "sm_compile.h"
#include "sm_front.h" /* sm_text */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

atomic_long sm__tool_spawns, sm__compiler_forks, sm__compiler_served, sm__tool_cpu_us;

enum { MAX_MESSAGE = 65536, HELLO_MS = 30000 };
static const char HELLO[] = "softmetal-ccserver 2\n";

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_tried;    /* a server was started, or tried, in this process */
static int g_sock = -1; /* our end of the server's socket; -1: none */
static pid_t g_pid, g_owner;
static char g_cxx[256]; /* the program the server runs */

static void wait_for(pid_t pid) {
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* At exit: the server sees the end of its socket, kills what still runs and
 * ends; the process that started it waits for it. A fork's child (which
 * shares the socket) leaves it to the parent. */
static void stop_server(void) {
  pthread_mutex_lock(&g_lock);
  if (g_sock >= 0 && getpid() == g_owner) {
    shutdown(g_sock, SHUT_RDWR);
    wait_for(g_pid);
    g_sock = -1;
  }
  pthread_mutex_unlock(&g_lock);
}

/* The server's environment: the program's, without LD_PRELOAD (the
 * compiler gets only the server's object), with the socket's number and
 * the compiler's path. */
static char **server_env(const char *shim, int fd, const char *exe, char *preload,
                         size_t preload_cap, char *fd_var, size_t fd_cap, char *exe_var,
                         size_t exe_cap) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = malloc((n + 4) * sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 &&
        strncmp(environ[i], "SOFTMETAL_CCSERVER_", 19) != 0)
      env[k++] = environ[i];
  snprintf(preload, preload_cap, "LD_PRELOAD=%s", shim);
  snprintf(fd_var, fd_cap, "SOFTMETAL_CCSERVER_FD=%d", fd);
  snprintf(exe_var, exe_cap, "SOFTMETAL_CCSERVER_EXE=%s", exe);
  env[k++] = preload;
  env[k++] = fd_var;
  env[k++] = exe_var;
  env[k] = NULL;
  return env;
}

/* Starts cxx with shim preloaded and waits for its hello; the socket, or
 * -1 if it did not start (a compiler of another architecture than the
 * object, a wrapper script that drops the environment...). */
static int start_server(const char *cxx, const char *exe, const char *shim, pid_t *pid) {
  int sv[2];
  if (strlen(shim) >= 4000 || strlen(exe) >= 4000 ||
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return -1;
  int fd = sv[1] == 3 ? 4 : 3; /* the server's end, as the server sees it */
  char preload[4100], fd_var[64], exe_var[4100];
  char **env = server_env(shim, fd, exe, preload, sizeof preload, fd_var, sizeof fd_var, exe_var,
                          sizeof exe_var);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], fd); /* first: sv[1] may be 0..2 */
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char *argv[] = {(char *)cxx, NULL};
  int rc = env ? posix_spawnp(pid, cxx, &fa, NULL, argv, env) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    return -1;
  }
  atomic_fetch_add(&sm__tool_spawns, 1);
  char hello[sizeof HELLO];
  struct pollfd p = {sv[0], POLLIN, 0};
  int ready;
  do ready = poll(&p, 1, HELLO_MS);
  while (ready < 0 && errno == EINTR);
  ssize_t got = ready > 0 ? recv(sv[0], hello, sizeof hello, 0) : -1;
  if (got == (ssize_t)sizeof HELLO - 1 && memcmp(hello, HELLO, sizeof HELLO - 1) == 0) return sv[0];
  close(sv[0]);
  kill(*pid, SIGKILL);
  wait_for(*pid);
  return -1;
}

void sm__ccserver_start(const char *cxx, const char *exe, const char *shim) {
  pthread_mutex_lock(&g_lock);
  if (!g_tried && strlen(cxx) < sizeof g_cxx) {
    g_tried = true;
    snprintf(g_cxx, sizeof g_cxx, "%s", cxx);
    pid_t pid;
    int sock = start_server(cxx, exe, shim, &pid);
    if (sock >= 0) {
      g_sock = sock;
      g_pid = pid;
      g_owner = getpid();
      atexit(stop_server);
    }
  }
  pthread_mutex_unlock(&g_lock);
}

/* Runs argv through the server: true with *status (a wait status) if the
 * server ran it; false if there is no server for argv[0] or it failed
 * before running the command (then no server is used again). */
static bool server_run(const char *const *argv, int log_fd, int *status) {
  pthread_mutex_lock(&g_lock);
  int sock = g_sock >= 0 && strcmp(argv[0], g_cxx) == 0 ? g_sock : -1;
  pthread_mutex_unlock(&g_lock);
  if (sock < 0) return false;
  char *msg = malloc(MAX_MESSAGE);
  if (!msg) return false;
  int argc = 0;
  while (argv[argc]) argc++;
  size_t n = (size_t)snprintf(msg, MAX_MESSAGE, "%d", argc) + 1;
  for (int i = 0; i < argc; i++) {
    size_t k = strlen(argv[i]) + 1;
    if (n + k > MAX_MESSAGE) {
      free(msg);
      return false;
    }
    memcpy(msg + n, argv[i], k);
    n += k;
  }
  int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  int reply[2] = {-1, -1};
  bool sent = false;
  if (cwd >= 0 && pipe2(reply, O_CLOEXEC) == 0) {
    int fds[3] = {cwd, log_fd, reply[1]};
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(sizeof fds)];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {msg, n};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control.b;
    m.msg_controllen = sizeof control.b;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(h), fds, sizeof fds);
    ssize_t w;
    do w = sendmsg(sock, &m, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    sent = w == (ssize_t)n;
    close(reply[1]);
  }
  free(msg);
  if (cwd >= 0) close(cwd);
  bool ran = false;
  long long got[3]; /* wait status, CPU us, whether a worker was forked for it */
  if (sent) {
    ssize_t r;
    do r = read(reply[0], got, sizeof got);
    while (r < 0 && errno == EINTR);
    ran = r == (ssize_t)sizeof got;
  }
  if (reply[0] >= 0) close(reply[0]);
  if (ran) {
    *status = (int)got[0];
    atomic_fetch_add(&sm__tool_cpu_us, (long)got[1]);
    atomic_fetch_add(&sm__compiler_served, 1);
    if (got[2]) atomic_fetch_add(&sm__compiler_forks, 1);
  } else if (sent) { /* the server is gone: start the compiler from now on */
    pthread_mutex_lock(&g_lock);
    if (g_sock == sock && getpid() == g_owner) {
      shutdown(g_sock, SHUT_RDWR);
      wait_for(g_pid);
      g_sock = -1;
    }
    pthread_mutex_unlock(&g_lock);
  }
  return ran;
}

bool sm__run_command(const char *const *argv, const char *log, int *status, char **diag) {
  bool ran = false;
  int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd >= 0) {
    ran = server_run(argv, log_fd, status);
    close(log_fd);
  }
  if (ran) return true;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  char *const *args;
  memcpy(&args, &argv, sizeof args);
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot run the C++ compiler '%s' (%s); set SOFTMETAL_CXX", argv[0],
                    strerror(rc));
    *diag = b.p ? b.p : strdup("cannot run the C++ compiler");
    return false;
  }
  atomic_fetch_add(&sm__tool_spawns, 1);
  struct rusage ru;
  while (wait4(pid, status, 0, &ru) < 0) {
    if (errno != EINTR) { /* SIGCHLD ignored: the status is gone; the outputs tell */
      *status = 0;
      return true;
    }
  }
  atomic_fetch_add(&sm__tool_cpu_us, (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                                         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return true;
}
