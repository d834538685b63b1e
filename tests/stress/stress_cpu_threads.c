/* SPDX-License-Identifier: MIT */
/* Concurrency of CPU devices with threads: two devices of three threads
 * each, used from two threads at once (each thread runs ops on both
 * devices, so each device's workers are asked for by two callers at once
 * and one of them runs alone). Every result must equal the one computed
 * first on the shared single-threaded device. The devices are released
 * at the end, which joins their workers: nothing runs at exit. A plain
 * program; tools/ci/stage-35-tsan.sh runs it under ThreadSanitizer. */
#include <cmetal/cmetal.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 300007 /* float32: above the 1 MiB threshold with an output */
#define ROUNDS 12
#define CALLERS 2

static void check(cm_status s, const char *what) {
    if (s != CM_OK) {
        fprintf(stderr, "%s: %s\n", what, cm_last_error());
        abort();
    }
}

static cm_tensor *make(cm_device *dev, cm_dtype d, int64_t n) {
    cm_tensor_desc desc = {.dtype = d, .ndim = 1, .shape = &n};
    cm_tensor *t = NULL;
    check(cm_tensor_create(dev, &desc, &t), "cm_tensor_create");
    return t;
}

/* y = tanh(x) + x, its float sum, and its cast to float16: one op of each kind. */
typedef struct results {
    float sum;
    uint32_t exp_bits; /* a hash of y */
    uint32_t half_bits;
    int64_t isum; /* int32 cast's sum: threads sum slabs */
    double runs;  /* sum of rows cut short: threads sum runs */
} results;

static uint32_t hash(const void *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ ((const uint8_t *)p)[i]) * 16777619u;
    return h;
}

static results compute(cm_device *dev) {
    cm_tensor *x = make(dev, CM_FLOAT32, N), *y = make(dev, CM_FLOAT32, N);
    cm_tensor *h = make(dev, CM_FLOAT16, N), *s = make(dev, CM_FLOAT32, 1);
    float *p = NULL;
    check(cm_tensor_host_write(x, CM_FLOAT32, (void **)&p), "host_write");
    for (int64_t i = 0; i < N; ++i)
        p[i] = (float)((i * 2654435761u) % 100003) / 1000.0f - 50.0f;
    check(cm_unary(CM_UNARY_TANH, x, y, NULL), "cm_unary");
    check(cm_binary(CM_BINARY_ADD, y, x, y, NULL), "cm_binary");
    check(cm_cast(y, h, NULL), "cm_cast");
    check(cm_reduce(CM_REDUCE_SUM, y, CM_AXIS_ALL, s, NULL), "cm_reduce");
    results r;
    const void *q = NULL;
    check(cm_tensor_host_read(y, CM_FLOAT32, &q), "host_read");
    r.exp_bits = hash(q, N * sizeof(float));
    check(cm_tensor_host_read(h, CM_FLOAT16, &q), "host_read");
    r.half_bits = hash(q, N * 2);
    check(cm_tensor_host_read(s, CM_FLOAT32, &q), "host_read");
    memcpy(&r.sum, q, sizeof r.sum);
    cm_tensor *i = make(dev, CM_INT32, N), *l = make(dev, CM_INT64, 1), *d = NULL;
    cm_tensor_desc scalar = {.dtype = CM_FLOAT64, .ndim = 0};
    check(cm_tensor_create(dev, &scalar, &d), "cm_tensor_create");
    check(cm_cast(y, i, NULL), "cm_cast");
    check(cm_reduce(CM_REDUCE_SUM, i, CM_AXIS_ALL, l, NULL), "cm_reduce");
    check(cm_tensor_get_element(l, (int64_t[]){0}, CM_INT64, &r.isum), "get_element");
    cm_tensor *y2 = NULL, *m = NULL, *cols = NULL;
    check(cm_tensor_slice(y, 0, 0, 547 * 548, 1, &y2), "cm_tensor_slice");
    check(cm_tensor_reshape(y2, 2, (int64_t[]){547, 548}, &m), "cm_tensor_reshape");
    check(cm_tensor_slice(m, 1, 0, 540, 1, &cols), "cm_tensor_slice");
    check(cm_reduce(CM_REDUCE_SUM, cols, CM_AXIS_ALL, d, NULL), "cm_reduce");
    check(cm_tensor_get_element(d, NULL, CM_FLOAT64, &r.runs), "get_element");
    cm_tensor_release(i);
    cm_tensor_release(l);
    cm_tensor_release(d);
    cm_tensor_release(y2);
    cm_tensor_release(m);
    cm_tensor_release(cols);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(h);
    cm_tensor_release(s);
    return r;
}

static results expected;
static cm_device *devices[2];

static void *caller(void *arg) {
    const int me = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; ++r) {
        const results got = compute(devices[(r + me) % 2]);
        if (got.sum != expected.sum || got.exp_bits != expected.exp_bits ||
            got.half_bits != expected.half_bits || got.isum != expected.isum ||
            memcmp(&got.runs, &expected.runs, sizeof got.runs) != 0) {
            fprintf(stderr, "caller %d round %d: results differ from one thread's\n", me, r);
            abort();
        }
    }
    return NULL;
}

int main(void) {
    cm_device *one = NULL;
    check(cm_device_open(CM_DEVICE_CPU, 0, &one), "cm_device_open");
    expected = compute(one);
    cm_device_release(one);
    for (int d = 0; d < 2; ++d) {
        cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = 3};
        check(cm_device_open_desc(&desc, &devices[d]), "cm_device_open_desc");
    }
    pthread_t t[CALLERS];
    for (int i = 0; i < CALLERS; ++i)
        if (pthread_create(&t[i], NULL, caller, (void *)(intptr_t)i) != 0)
            abort();
    for (int i = 0; i < CALLERS; ++i)
        pthread_join(t[i], NULL);
    for (int d = 0; d < 2; ++d)
        check(cm_device_release(devices[d]), "cm_device_release");
    puts("stress_cpu_threads: ok");
    return 0;
}
