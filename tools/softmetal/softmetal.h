/* SPDX-License-Identifier: MIT */
/* softmetal: test hooks of the software Metal framework (libsoftmetal.so).
 * The runtime itself only uses the Apple-named exports; these are for tests. */
#ifndef SOFTMETAL_H
#define SOFTMETAL_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

struct softmetal_stats {
  long live_objects;              /* objects alive now, all classes */
  long allocs;                    /* objects created since load */
  long deallocs;                  /* objects destroyed since load */
  long retains;                   /* retain messages since load */
  long releases;                  /* release messages since load */
  long autoreleases;              /* autorelease messages since load */
  long live_buffer_bytes;         /* bytes held by live buffers */
  long kernel_compiles;           /* libraries checked since load (cache misses of
                             newLibraryWithSource:: preprocessing, front end, syntax check) */
  long kernel_cache_hits;         /* libraries taken from the cache since load (nothing run) */
  long unsafe_math_libraries;     /* libraries made with fast or relaxed math
                                 (options nil included) since load */
  long blocked_in_command_buffer; /* threads now blocked in -[MTLCommandQueue commandBuffer]
                                     because the queue's maximum is reached */
  long archive_restores;          /* compiled functions taken from a binary archive
                             (MTLBinaryArchive) instead of the compiler */
  long syntax_checks;             /* clang -fsyntax-only runs (newLibraryWithSource: checks
                             the whole source; no code is generated) */
  long function_compiles;         /* code generations: one function each, when its first
                             pipeline is made and its code is in no cache */
  long function_cache_hits;       /* functions' code loaded from the kernel cache */
  long tool_spawns;               /* processes started for the compiler and the linker
                             (the compiler server counts once) */
  long compiler_forks;            /* workers the compiler server forked: each runs
                             compiler commands one after another in its process */
  long tool_cpu_us;               /* CPU microseconds of those commands and processes
                             (the server's own start excluded) */
  long compiler_served;           /* compiler commands the compiler server's workers ran
                             (instead of a new process each) */
  long lenient_api_uses;          /* API misuse tolerated as a Mac without Metal's validation layer
                             tolerates it (MTL_DEBUG_LAYER unset): a threadgroup memory
                             length rounded up to a multiple of 16 */
};

/* Fills *out with process-wide counters. Thread-safety: any thread. */
void softmetal_stats(struct softmetal_stats *out);

/* Waits until every command buffer committed so far on any queue has
 * completed, its completed handlers have returned and softmetal has dropped
 * its references to it: completed handlers may run after waitUntilCompleted
 * returns. Call it before counting live objects. Thread-safety: any thread
 * but a completed handler. */
void softmetal_quiesce(void);

/* Live objects of the class named class_name (e.g. "SMBuffer"), or -1 when
 * softmetal has no such class. Thread-safety: any thread. */
long softmetal_live_count(const char *class_name);

/* The labels of the command buffer committed last in the process, as a
 * debugger or a GPU trace would show them: the command buffer's own, then
 * each of its encoders' in the order they ended, a line each (an empty
 * line for no label). Writes at most cap - 1 bytes and a NUL to out (out
 * may be NULL when cap is 0) and returns the whole text's length, "" before
 * any commit. Thread-safety: any thread. */
size_t softmetal_last_commit_labels(char *out, size_t cap);

/* The argument table of a compute pipeline state: bit n of *buffers for each
 * [[buffer(n)]] the kernel takes (after function constants), of *written for
 * those it may write (non-const device pointers and references), of
 * *threadgroup for [[threadgroup(n)]]. Returns 0, or -1 when pipeline is not
 * a softmetal compute pipeline. Thread-safety: any thread. */
int softmetal_pipeline_bindings(void *pipeline, unsigned *buffers, unsigned *written,
                                unsigned *threadgroup);

/* The persona every device answers as, SOFTMETAL_PERSONA's value read when
 * the library loaded: "apple-silicon" (the default), "paravirtual" or
 * "amd-discrete". For tests; a program should ask the device
 * (supportsFamily:, threadExecutionWidth, ...). Thread-safety: any thread. */
const char *softmetal_persona(void);

/* Checks an MSL source as newLibraryWithSource:options:error: does (math_mode
 * an MTLMathMode, language_version an MTLLanguageVersion or 0), through the
 * kernel cache. Returns 0 when it compiles, 1 with *diagnostics (malloc'd,
 * program_source:LINE:COL) when it does not, -1 with *diagnostics when
 * softmetal cannot check it. Used by softmetal-metallib. Thread-safety: any
 * thread. */
int softmetal_check_source(const char *source, long math_mode, unsigned long language_version,
                           char **diagnostics);

#ifdef __cplusplus
}
#endif
#endif
