/* SPDX-License-Identifier: MIT */
/* libsoftmetal's constructor: registers the Foundation core, then every
 * framework's classes in the order they depend on each other; Metal's error
 * domains; softmetal_stats, which gathers every file's counters. */
#include "sm_internal.h"
#include "sm_compile.h"

/* Metal's error domains (NSString objects, compared by pointer as Apple's). */
SM_EXPORT id MTLLibraryErrorDomain, MTLCommandBufferErrorDomain, MTLBinaryArchiveDomain,
    MTLCaptureErrorDomain, MTLCounterErrorDomain;

SM_EXPORT void softmetal_stats(struct softmetal_stats *out) {
  sm__object_stats(out);
  out->live_buffer_bytes = atomic_load(&sm__buffer_bytes);
  out->kernel_compiles = atomic_load(&sm__compiles);
  out->kernel_cache_hits = atomic_load(&sm__cache_hits);
  out->archive_restores = atomic_load(&sm__archive_restores);
  out->syntax_checks = atomic_load(&sm__syntax_checks);
  out->function_compiles = atomic_load(&sm__function_compiles);
  out->function_cache_hits = atomic_load(&sm__function_cache_hits);
  out->tool_spawns = atomic_load(&sm__tool_spawns);
  out->compiler_forks = atomic_load(&sm__compiler_forks);
  out->compiler_served = atomic_load(&sm__compiler_served);
  out->tool_cpu_us = atomic_load(&sm__tool_cpu_us);
  out->unsafe_math_libraries = atomic_load(&sm__unsafe_math_libraries);
  out->blocked_in_command_buffer = atomic_load(&sm__blocked_cmdbuf);
  out->lenient_api_uses = sm__lenient_uses();
}

/* Every class and method exists before any thread of ours starts. */
__attribute__((constructor)) static void softmetal_load(void) {
  sm__modes_init(); /* SOFTMETAL_PERSONA, MTL_DEBUG_LAYER */
  sm__register_foundation();
  sm__error_domain(&MTLLibraryErrorDomain, "MTLLibraryErrorDomain");
  sm__error_domain(&MTLCommandBufferErrorDomain, "MTLCommandBufferErrorDomain");
  sm__error_domain(&MTLBinaryArchiveDomain, "MTLBinaryArchiveDomain");
  sm__error_domain(&MTLCaptureErrorDomain, "MTLCaptureErrorDomain");
  sm__error_domain(&MTLCounterErrorDomain, "MTLCounterErrorDomain");
  sm__register_ns();
  sm__register_data();
  sm__register_classes(); /* the classes several files implement */
  sm__register_metal();
  sm__register_msl();
  sm__register_archive();
  sm__register_heap();
  sm__register_host();
  sm__register_argenc();
  sm__register_dispatch();
}
