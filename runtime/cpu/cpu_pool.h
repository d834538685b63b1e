/* SPDX-License-Identifier: MIT */
/* The CPU device's worker threads (cpu_pool.c). Internal to runtime/cpu. */
#ifndef CMETAL_CPU_POOL_H
#define CMETAL_CPU_POOL_H

#include <cmetal/status.h>

#include <stdint.h>

typedef struct cm__cpu_pool cm__cpu_pool;

/* One task of a parallel job: task index in [0, ntasks). */
typedef void (*cm__cpu_task_fn)(void *ctx, int64_t task);

/* Ops smaller than this many bytes (of the output and inputs together, or
 * of the reduced input) run on the calling thread alone: below it starting
 * the workers costs more than it saves. */
#define CM__CPU_PARALLEL_MIN_BYTES ((int64_t)1 << 20)

/* A pool for `nthreads` threads, the caller's included (>= 2). No thread is
 * started until the first job. Errors as cm_device_open. */
cm_status cm__cpu_pool_create(uint32_t nthreads, cm__cpu_pool **out);

/* Joins every worker and frees the pool. No job may be running. */
void cm__cpu_pool_destroy(cm__cpu_pool *pool);

/* Threads a job may use: 1 for a NULL pool. */
uint32_t cm__cpu_pool_threads(const cm__cpu_pool *pool);

/* Runs fn(ctx, t) for every t in [0, ntasks) and returns when all have
 * returned. Tasks run on the calling thread and the workers, in any order;
 * with a NULL pool, while another thread's job holds the pool, or where
 * no worker could be started, all of them run on the calling thread. The
 * result must therefore not depend on which thread runs a task. */
void cm__cpu_pool_run(cm__cpu_pool *pool, int64_t ntasks, cm__cpu_task_fn fn, void *ctx);

#endif /* CMETAL_CPU_POOL_H */
