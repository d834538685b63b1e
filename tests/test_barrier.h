/* SPDX-License-Identifier: MIT */
/* A thread barrier for the test programs, of a mutex and a condition
 * variable: macOS has no pthread_barrier_t (POSIX's barriers are an
 * option Apple does not implement). Reusable: each release starts a new
 * generation. */
#ifndef CMETAL_TESTS_TEST_BARRIER_H
#define CMETAL_TESTS_TEST_BARRIER_H

#include <errno.h>
#include <pthread.h>

typedef struct test_barrier {
    pthread_mutex_t lock;
    pthread_cond_t released;
    unsigned count;      /* threads per generation */
    unsigned waiting;    /* arrived in this generation */
    unsigned generation; /* releases so far */
} test_barrier;

/* 0, or an errno value; count must be at least 1. */
static inline int test_barrier_init(test_barrier *b, unsigned count) {
    if (count == 0)
        return EINVAL;
    int rc = pthread_mutex_init(&b->lock, NULL);
    if (rc != 0)
        return rc;
    rc = pthread_cond_init(&b->released, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&b->lock);
        return rc;
    }
    b->count = count;
    b->waiting = 0;
    b->generation = 0;
    return 0;
}

/* Blocks until `count` threads have called it; returns 1 in the thread
 * that released the others (as PTHREAD_BARRIER_SERIAL_THREAD), else 0. */
static inline int test_barrier_wait(test_barrier *b) {
    pthread_mutex_lock(&b->lock);
    const unsigned generation = b->generation;
    int last = 0;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        ++b->generation;
        pthread_cond_broadcast(&b->released);
        last = 1;
    } else {
        while (generation == b->generation)
            pthread_cond_wait(&b->released, &b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return last;
}

static inline void test_barrier_destroy(test_barrier *b) {
    pthread_cond_destroy(&b->released);
    pthread_mutex_destroy(&b->lock);
}

#endif
