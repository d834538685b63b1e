/* SPDX-License-Identifier: MIT */
/* softmetal's compile driver (sm_compile.c): Metal's compile model on clang++.
 *
 * A library is checked, not compiled: the source is preprocessed, rewritten
 * by the front end (sm_front.c) and checked by clang -fsyntax-only against a
 * precompiled metal_stdlib; what the library needs before any code exists
 * (kernel names, bindings, function constants) comes from the front end's
 * manifest. A function's code is generated when a pipeline is made: the
 * checked translation unit with the other kernels' guarded spans blanked,
 * compiled at -O2 to a shared object of its own.
 *
 * Cache entries (SOFTMETAL_CACHE_DIR), each used only when the SHA-256 of
 * its key material it stores equals the request's:
 *   l-<16 hex>.ii  a checked library: "softmetal-library <64 hex>\n", then
 *                  the translation unit (its manifest inside)
 *   f-<16 hex>.so  a function's code; its last SM_KEY_TRAILER bytes are
 *                  "\nsoftmetal-key <64 hex>\n"
 *   p-<64 hex>.pch metal_stdlib precompiled (named by its whole key)
 *   cc-<16 hex>.txt the compiler's --version output
 *   include-<16 hex>/ metal_stdlib, sm_abi.h and the header aliases
 * Thread-safety: every function here may be called from any thread. */
#ifndef SM_COMPILE_H
#define SM_COMPILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sm_abi.h"
#include "sm_sha256.h"

/* A checked library. Owned strings and arrays; free with
 * sm__compiled_library_free. */
typedef struct {
  char *tu;                       /* the checked translation unit */
  struct sm_kernel_desc *kernels; /* from the manifest: fn NULL, written_mask 0 */
  unsigned n_kernels;
  struct sm_constant_desc *constants;
  unsigned n_constants;
  char *strings;    /* names of kernels[] and constants[] */
  uint32_t *arrays; /* fc_used and fc_conds of kernels[] */
  /* Per kernel: its manifest's G lines ("c guard": constant c is used only
   * where guard holds), consecutive NUL-terminated strings in strings, and
   * their count. */
  const char **fc_guards;
  uint32_t *fc_guard_count;
  sm_digest key;          /* the library's key */
  char *path;             /* l-<...>.ii */
  sm_digest compiler_key; /* cc-<...>.txt */
  char *compiler_path;
  int math_mode;          /* MTLMathMode 0..2 */
  bool fast_functions;    /* MTLMathFloatingPointFunctions Fast */
  unsigned metal_version; /* 0: metal_stdlib's default */
  char cxx[256];
} sm_compiled_library;

/* Checks source (newLibraryWithSource:), or takes it from the kernel cache
 * or a binary archive. On failure returns false with *diag (malloc'd; the
 * compiler's diagnostics naming program_source:LINE:COL) and *internal set
 * when softmetal itself failed (no compiler, cache not writable). */
bool sm__compile_library(const char *source, int math_mode, bool fast_functions,
                         unsigned metal_version, sm_compiled_library *out, char **diag,
                         bool *internal);
void sm__compiled_library_free(sm_compiled_library *l);

/* The key and cache path of kernel `index`'s code (nothing is compiled);
 * tracked: the code that reports every memory access (softmetal_touch). */
void sm__function_key(const sm_compiled_library *l, unsigned index, bool tracked, sm_digest *key,
                      char **path);
/* Generates kernel `index`'s code (or takes it from the cache or an
 * archive) and dlopens it; NULL with *diag on failure. Tracked code calls
 * its exported function pointer softmetal_touch(address, bytes, write) at
 * every memory access, which the caller sets. */
void *sm__compile_function(const sm_compiled_library *l, unsigned index, bool tracked, char **diag);

/* Running the compiler and the linker (sm_spawn.c). */
/* Starts the compiler server (sm_ccserver.c) for cxx (exe: its resolved
 * path), with shim (the server's object, compiled by cxx) preloaded: once
 * per process, for the first compiler asked; later calls return at once.
 * If it does not start, every command starts the compiler itself. */
void sm__ccserver_start(const char *cxx, const char *exe, const char *shim);
/* Runs argv with stdout and stderr to the file log (created 0600): through
 * the server when argv[0] is its compiler, else in a new process. True
 * with its wait status in *status; false with *diag (malloc'd) if it could
 * not be started. */
bool sm__run_command(const char *const *argv, const char *log, int *status, char **diag);

/* Counters (softmetal_stats). */
extern atomic_long sm__syntax_checks, sm__function_compiles, sm__function_cache_hits;
extern atomic_long sm__tool_spawns, sm__compiler_forks, sm__compiler_served, sm__tool_cpu_us;

#endif
