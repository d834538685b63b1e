/* SPDX-License-Identifier: MIT */
/* The CPU device's worker threads: started on the first large op, joined
 * when the device is destroyed (no thread is detached, none outlives its
 * device). One job at a time: a job runs its tasks on the calling thread
 * and the workers, handing out task indices from an atomic counter. A
 * second caller that finds the pool busy runs its job alone rather than
 * wait, so two threads using one device never block each other. */
#include "cpu_pool.h"

#include "core/internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

struct cm__cpu_pool {
    uint32_t nthreads;        /* the caller's included */
    pthread_mutex_t job_lock; /* held by the thread whose job runs */
    pthread_mutex_t lock;     /* guards everything below but `next` */
    pthread_cond_t wake;      /* a new job, or quit */
    pthread_cond_t done;      /* pending reached 0 */
    bool tried;               /* workers were started (or failed to start) */
    bool quit;
    uint32_t started;    /* workers running */
    uint32_t pending;    /* workers not yet done with the job */
    uint64_t generation; /* counts jobs */
    cm__cpu_task_fn fn;
    void *ctx;
    int64_t ntasks;
    atomic_int_fast64_t next; /* the next task index to hand out */
    pthread_t threads[];      /* nthreads - 1 */
};

static void cm__pool_work(cm__cpu_pool *pool, cm__cpu_task_fn fn, void *ctx, int64_t ntasks) {
    for (;;) {
        const int64_t t = (int64_t)atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (t >= ntasks)
            return;
        fn(ctx, t);
    }
}

static void *cm__pool_main(void *arg) {
    cm__cpu_pool *pool = arg;
    uint64_t seen = 0; /* workers start before the first job */
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->quit && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->quit)
            break;
        seen = pool->generation;
        const cm__cpu_task_fn fn = pool->fn;
        void *ctx = pool->ctx;
        const int64_t ntasks = pool->ntasks;
        pthread_mutex_unlock(&pool->lock);
        cm__pool_work(pool, fn, ctx, ntasks);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

cm_status cm__cpu_pool_create(uint32_t nthreads, cm__cpu_pool **out) {
    const size_t bytes = sizeof(cm__cpu_pool) + (size_t)(nthreads - 1) * sizeof(pthread_t);
    cm__cpu_pool *pool = cm__alloc(bytes, _Alignof(cm__cpu_pool));
    if (pool == NULL)
        return cm__fail_as("cm_device_open_desc", CM_ERR_OUT_OF_MEMORY,
                           "no memory for a pool of %u threads", nthreads);
    pool->nthreads = nthreads;
    atomic_init(&pool->next, 0);
    if (pthread_mutex_init(&pool->job_lock, NULL) != 0) {
        cm__free(pool);
        return cm__fail_as("cm_device_open_desc", CM_ERR_OUT_OF_MEMORY,
                           "pthread_mutex_init failed");
    }
    if (pthread_mutex_init(&pool->lock, NULL) != 0) {
        pthread_mutex_destroy(&pool->job_lock);
        cm__free(pool);
        return cm__fail_as("cm_device_open_desc", CM_ERR_OUT_OF_MEMORY,
                           "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&pool->wake, NULL) != 0) {
        pthread_mutex_destroy(&pool->lock);
        pthread_mutex_destroy(&pool->job_lock);
        cm__free(pool);
        return cm__fail_as("cm_device_open_desc", CM_ERR_OUT_OF_MEMORY, "pthread_cond_init failed");
    }
    if (pthread_cond_init(&pool->done, NULL) != 0) {
        pthread_cond_destroy(&pool->wake);
        pthread_mutex_destroy(&pool->lock);
        pthread_mutex_destroy(&pool->job_lock);
        cm__free(pool);
        return cm__fail_as("cm_device_open_desc", CM_ERR_OUT_OF_MEMORY, "pthread_cond_init failed");
    }
    *out = pool;
    return CM_OK;
}

void cm__cpu_pool_destroy(cm__cpu_pool *pool) {
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->quit = true;
    pthread_cond_broadcast(&pool->wake);
    const uint32_t started = pool->started;
    pthread_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < started; ++i)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->job_lock);
    cm__free(pool);
}

uint32_t cm__cpu_pool_threads(const cm__cpu_pool *pool) {
    return pool == NULL ? 1 : pool->nthreads;
}

static void cm__pool_run_alone(int64_t ntasks, cm__cpu_task_fn fn, void *ctx) {
    for (int64_t t = 0; t < ntasks; ++t)
        fn(ctx, t);
}

void cm__cpu_pool_run(cm__cpu_pool *pool, int64_t ntasks, cm__cpu_task_fn fn, void *ctx) {
    if (pool == NULL || ntasks <= 1 || pthread_mutex_trylock(&pool->job_lock) != 0) {
        cm__pool_run_alone(ntasks, fn, ctx);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    if (!pool->tried) { /* the first job starts the workers; fewer is fine */
        pool->tried = true;
        /* Workers block every signal (they inherit the mask): the program's
         * signals go to its own threads. */
        sigset_t all, old;
        sigfillset(&all);
        const bool masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
        while (pool->started + 1 < pool->nthreads &&
               pthread_create(&pool->threads[pool->started], NULL, cm__pool_main, pool) == 0)
            pool->started++;
        if (masked)
            pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (pool->started == 0) {
        pthread_mutex_unlock(&pool->lock);
        pthread_mutex_unlock(&pool->job_lock);
        cm__pool_run_alone(ntasks, fn, ctx);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->ntasks = ntasks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    pool->pending = pool->started;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    cm__pool_work(pool, fn, ctx, ntasks);
    pthread_mutex_lock(&pool->lock);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&pool->job_lock);
}
