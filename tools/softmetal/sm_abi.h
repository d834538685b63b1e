/* SPDX-License-Identifier: MIT */
/* Interface between softmetal and the kernels it compiles (C and C++).
 * Embedded into libsoftmetal.so and written next to the compat metal_stdlib. */
#ifndef SM_ABI_H
#define SM_ABI_H
#include <stdint.h>

#define SM_ABI_VERSION 4u
#define SM_MAX_BINDINGS 31u
#define SM_SIMD_WIDTH_MAX 64u /* lanes of a SIMD group: sm_thread.simd_width, 32 or 64 */
#define SM_SIMD_SLOT 32u      /* bytes per lane and bank: 16 of value, then the tag */

struct sm_thread;
typedef void (*sm_kernel_fn)(struct sm_thread *t);

/* One per kernel function, in the compiled library's softmetal_kernels[]. */
struct sm_kernel_desc {
  const char *name;
  sm_kernel_fn fn;
  uint32_t needs_fibers;     /* barriers or simdgroup functions */
  uint32_t buffer_mask;      /* [[buffer(n)]] indices used */
  uint32_t threadgroup_mask; /* [[threadgroup(n)]] indices used */
  uint32_t written_mask;     /* [[buffer(n)]] that is a non-const device pointer or reference */
  /* Function constants: positions in softmetal_constants[] the kernel reaches. */
  const uint32_t *fc_used;
  uint32_t fc_used_count;
  /* Bindings present only when a bool constant is true ([[function_constant(c)]] on
   * a parameter): triples {0 buffer / 1 threadgroup, index, constant position}. */
  uint32_t fc_cond_count;
  const uint32_t *fc_conds;
  /* Since ABI 3: runs every thread of the threadgroup t describes (t's
   * per-thread fields give its first thread), or NULL when needs_fibers. */
  sm_kernel_fn group_fn;
  /* Since ABI 4: the features it may use that some devices lack (softmetal's
   * SM_FEATURE_*), from the library's manifest; 0 in the compiled table. */
  uint32_t features;
};

/* One per function constant of a library, in declaration order
 * (softmetal_constants[], softmetal_constant_count). Derived constants are
 * program-scope constants initialised from function constants. */
struct sm_constant_desc {
  const char *name;
  uint32_t index;    /* [[function_constant(index)]]; UINT32_MAX when derived */
  uint32_t type;     /* MTLDataType */
  uint32_t size;     /* bytes of the value */
  uint32_t optional; /* named in is_function_constant_defined() */
};
#define SM_FC_SLOT 16u /* bytes per constant in sm_thread.fc_values */

/* A compiled library also exports
 *   unsigned long long softmetal_tg_static_bytes(unsigned kernel);
 * the bytes of the threadgroup variables declared in function bodies that
 * softmetal_kernels[kernel] can reach (staticThreadgroupMemoryLength). */

/* Argument buffers: the layout of a struct that a [[buffer(n)]] parameter
 * points or refers to, when program_source defines it with [[id(k)]]
 * members or device/constant pointer members (clang's own layout). A
 * compiled library exports
 *   const struct sm_argbuf_layout *softmetal_argbuf(unsigned kernel, unsigned index);
 * NULL when buffer `index` of the kernel is no such struct. */
#define SM_ARGBUF_IMPLICIT 0xffffffffu /* no [[id(k)]]: the next index */
struct sm_argbuf_member {
  uint32_t id;      /* [[id(k)]], or SM_ARGBUF_IMPLICIT */
  uint32_t offset;  /* offsetof the member */
  uint32_t size;    /* bytes of one element */
  uint32_t count;   /* elements (1, or an array's extent); each takes one index */
  uint32_t pointer; /* 1: a pointer (8 bytes, a host address on the CPU) */
};
struct sm_argbuf_layout {
  uint32_t size, align, n;
  const struct sm_argbuf_member *members; /* declaration order */
};

/* One per thread of a dispatch; the kernel reads it through sm_cur. */
struct sm_thread {
  void *const *buffers;      /* [SM_MAX_BINDINGS] */
  void *const *tgmem;        /* [SM_MAX_BINDINGS] */
  uint32_t tpig[3];          /* thread_position_in_grid */
  uint32_t tpg[3];           /* threads_per_grid */
  uint32_t tpitg[3];         /* thread_position_in_threadgroup */
  uint32_t tgpig[3];         /* threadgroup_position_in_grid */
  uint32_t tptg[3];          /* threads_per_threadgroup */
  uint32_t tgpg[3];          /* threadgroups_per_grid */
  uint32_t tiitg;            /* thread_index_in_threadgroup */
  uint32_t lane;             /* thread_index_in_simdgroup */
  uint32_t simdgroup;        /* simdgroup_index_in_threadgroup */
  uint32_t tg_threads;       /* threads in this threadgroup */
  uint32_t simd_seq;         /* unused since ABI 2 */
  uint32_t logging;          /* MTLCompileOptions.enableLogging of its library: os_log prints */
  unsigned char *simd_slots; /* [2][tg_threads][SM_SIMD_SLOT]: deposits, released values */
  void (*barrier)(struct sm_thread *t);   /* threadgroup_barrier */
  void (*simd_sync)(struct sm_thread *t); /* waits for the simdgroup's active lanes */
  void *sched;                            /* softmetal's scheduler state */
  /* Function constant values of the pipeline: [constants][SM_FC_SLOT], and
   * whether each was given. */
  const unsigned char *fc_values;
  const unsigned char *fc_defined;
  /* Threadgroup variables declared in function bodies: the storage of
   * declaration id for the current threadgroup, poisoned (0xFF) when first
   * reached in it. */
  void *(*tg_var)(struct sm_thread *t, uint32_t id, uint32_t size, uint32_t align);
  void *tg_arena;
  /* Since ABI 2: SIMD-group functions act over the lanes waiting at the same
   * call. Before simd_sync, a lane writes its value to its slot of bank 0 and
   * names its call site; when released, bank 1 holds the values of the lanes
   * released with it and simd_active says which lanes those are. */
  const char *simd_file; /* call site: __builtin_FILE() */
  uint64_t simd_site;    /* call site: line << 16 | column */
  uint64_t simd_active;  /* bit l: lane l was released with this lane (ABI 4: 64 bits) */
  /* Records a strict-mode failure (the first one per dispatch wins); the
   * command buffer fails with it. other_lane < 0: the function needs every
   * lane of the simdgroup active. */
  void (*simd_fail)(struct sm_thread *t, const char *function, int32_t other_lane);
  /* Since ABI 4: lanes of a SIMD group (threadExecutionWidth: 32, or 64 for
   * the amd-discrete persona). */
  uint32_t simd_width;
  /* Since ABI 4: dispatch_threads_per_threadgroup, the size given at
   * dispatch (tptg is the size of this threadgroup, smaller at the edges of
   * a dispatchThreads grid). */
  uint32_t dtptg[3];
};

#endif
