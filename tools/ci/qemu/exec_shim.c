/* SPDX-License-Identifier: MIT */
/* Preloaded (LD_PRELOAD) into aarch64 programs that qemu-aarch64 runs in
 * user mode, where the host kernel cannot execve an aarch64 file (no
 * binfmt_misc here): an execve of an aarch64 ELF becomes an execve of
 * qemu-aarch64 running it, with this shim and the library path again.
 * Criterion needs it: each test runs in a worker that its runner starts
 * with fork + execve of its own executable (BoxFort). Without the shim the
 * execve fails with ENOEXEC and the runner aborts ("Could not spawn test
 * instance: Protocol error").
 *
 * At load the shim takes LD_PRELOAD and LD_LIBRARY_PATH out of the
 * environment (they name aarch64 files) and passes them to the emulated
 * child only, through qemu's -E, so host programs the tests start (clang++
 * for softmetal's kernels) get a clean environment. QEMU_LD_PREFIX (the
 * guest's /) is inherited. Built by tools/ci/qemu/run.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { EM_AARCH64_ = 183, MAX_ARGS = 1024 };

static char preload[4096], library_path[8192];

__attribute__((constructor)) static void shim_init(void) {
    const char *p = getenv("LD_PRELOAD"), *l = getenv("LD_LIBRARY_PATH");
    if (p != NULL)
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", p);
    if (l != NULL)
        snprintf(library_path, sizeof library_path, "LD_LIBRARY_PATH=%s", l);
    unsetenv("LD_PRELOAD");
    unsetenv("LD_LIBRARY_PATH");
}

static int is_aarch64_elf(const char *path) {
    unsigned char h[20];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    return n == (ssize_t)sizeof h && memcmp(h, "\177ELF", 4) == 0 &&
           (h[18] | h[19] << 8) == EM_AARCH64_;
}

static int host_execve(const char *path, char *const argv[], char *const envp[]) {
    return (int)syscall(SYS_execve, path, argv, envp);
}

int execve(const char *path, char *const argv[], char *const envp[]) {
    if (!is_aarch64_elf(path))
        return host_execve(path, argv, envp);
    const char *qemu = getenv("CMETAL_QEMU");
    if (qemu == NULL || *qemu == '\0')
        qemu = "/usr/bin/qemu-aarch64";
    char *args[MAX_ARGS];
    int n = 0;
    args[n++] = (char *)qemu;
    if (preload[0] != '\0') {
        args[n++] = "-E";
        args[n++] = preload;
    }
    if (library_path[0] != '\0') {
        args[n++] = "-E";
        args[n++] = library_path;
    }
    if (argv[0] != NULL) {
        args[n++] = "-0"; /* keep the child's argv[0] (BoxFort names its workers) */
        args[n++] = argv[0];
    }
    args[n++] = (char *)path;
    for (int i = 1; argv[0] != NULL && argv[i] != NULL; i++) {
        if (n >= MAX_ARGS - 1)
            return host_execve(path, argv, envp); /* fails as it would have */
        args[n++] = argv[i];
    }
    args[n] = NULL;
    return host_execve(qemu, args, envp);
}
