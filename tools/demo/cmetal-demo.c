/* SPDX-License-Identifier: MIT */
/* cmetal-demo: the main job, and an example to read.
 *
 * A "producer" (standing in for NumPy or PyTorch) owns an array and hands
 * it over through DLPack. cmetal imports it without copying onto the
 * default device (Metal when present: Apple's, or softmetal on Linux with
 * CMETAL_METAL_FRAMEWORK set; else the CPU), computes y = 2 * x + 1 in place
 * and the sum of y, exports the result back through DLPack, and the
 * producer checks the numbers in its own memory. Only the public API. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <cmetal/cmetal.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Any failing call prints its status and message and exits. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        cm_status s_ = (call);                                                                     \
        if (s_ != CM_OK) {                                                                         \
            fprintf(stderr, "cmetal-demo: %s\n  failed: %s (%s)\n", #call, cm_last_error(),        \
                    cm_status_name(s_));                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- the producer: an array and a DLPack capsule over it ---- */

enum { ROWS = 64, COLS = 64 };

typedef struct producer {
    float *data; /* ROWS x COLS, page-aligned so a Metal device can map it */
    int64_t shape[2];
    atomic_int deleter_calls; /* the deleter may run on Metal's thread */
    DLManagedTensorVersioned managed;
} producer;

static void producer_deleter(DLManagedTensorVersioned *self) {
    producer *p = self->manager_ctx;
    atomic_fetch_add(&p->deleter_calls, 1); /* the array stays the producer's */
}

static DLManagedTensorVersioned *producer_export(producer *p) {
    p->shape[0] = ROWS;
    p->shape[1] = COLS;
    p->managed = (DLManagedTensorVersioned){
        .version = {1, 0},
        .manager_ctx = p,
        .deleter = producer_deleter,
        .dl_tensor = {.data = p->data,
                      .device = {kDLCPU, 0},
                      .ndim = 2,
                      .dtype = {kDLFloat, 32, 1},
                      .shape = p->shape,
                      .strides = NULL},
    };
    return &p->managed;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr,
                "cmetal-demo: unexpected argument '%s': it takes none (CMETAL_DEVICE=cpu "
                "or metal picks the device)\n",
                argv[1]);
        return 2;
    }
    producer p = {.data = aligned_alloc(CM_METAL_PAGE_SIZE, sizeof(float) * ROWS * COLS)};
    for (int i = 0; i < ROWS * COLS; ++i)
        p.data[i] = (float)(i % 100) / 4.0f;

    cm_device *device = NULL;
    CHECK(cm_device_open(CM_DEVICE_DEFAULT, 0, &device));
    cm_device_info info;
    CHECK(cm_device_get_info(device, &info));
    printf("cmetal %s on the %s device \"%s\"%s\n", cm_version_string(),
           cm_device_type_name(info.type), info.name,
           info.software && info.type == CM_DEVICE_METAL ? " (softmetal: software Metal)" : "");

    /* 1. Import the producer's array: no copy. */
    cm_tensor *x = NULL;
    CHECK(cm_dlpack_import_versioned(
        producer_export(&p), &(cm_dlpack_import_desc){.device = device, .copy = CM_COPY_NEVER},
        &x));
    cm_tensor_info xi;
    CHECK(cm_tensor_get_info(x, &xi));
    cm_buffer_info bi;
    CHECK(cm_buffer_get_info(xi.buffer, &bi));
    printf("imported %lld x %lld float32: cmetal's buffer %s the producer's memory (%s)\n",
           (long long)xi.shape[0], (long long)xi.shape[1],
           bi.host == (void *)p.data ? "IS" : "is NOT",
           bi.flags & CM_BUFFER_COPIED ? "copied" : "0 bytes copied");

    /* 2. y = 2 * x + 1, in place, with scalars broadcast from 0-d tensors. */
    cm_tensor *two = NULL, *one = NULL;
    const cm_tensor_desc scalar = {.dtype = CM_FLOAT32};
    CHECK(cm_tensor_create(device, &scalar, &two));
    CHECK(cm_tensor_create(device, &scalar, &one));
    const double two_v = 2.0, one_v = 1.0;
    CHECK(cm_fill(two, CM_FLOAT64, &two_v, NULL));
    CHECK(cm_fill(one, CM_FLOAT64, &one_v, NULL));
    CHECK(cm_binary(CM_BINARY_MUL, x, two, x, NULL));
    CHECK(cm_binary(CM_BINARY_ADD, x, one, x, NULL));

    /* 3. A reduction into a new 0-d tensor. */
    cm_tensor *sum = NULL;
    CHECK(cm_tensor_create(device, &scalar, &sum));
    CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, sum, NULL));
    float total = 0;
    CHECK(cm_tensor_get_element(sum, NULL, CM_FLOAT32, &total)); /* waits for the device */

    /* 4. Export the result back for the CPU: again no copy. */
    cm_dlpack_managed out;
    CHECK(cm_dlpack_export(x,
                           &(cm_dlpack_export_desc){
                               .max_version = {1, 0}, .device_type = kDLCPU, .copy = CM_COPY_NEVER},
                           &out));
    const float *y = out.versioned->dl_tensor.data;
    printf("exported for kDLCPU: data %s the producer's memory, %s\n",
           y == p.data ? "IS" : "is NOT", out.copied ? "copied" : "0 bytes copied");

    /* 5. The producer checks every number in its own memory. */
    double want_total = 0;
    int wrong = 0;
    for (int i = 0; i < ROWS * COLS; ++i) {
        const float want = 2.0f * ((float)(i % 100) / 4.0f) + 1.0f;
        want_total += want;
        wrong += p.data[i] != want;
    }
    printf("y = 2x + 1: %d of %d elements wrong; y[0][5] = %.2f, y[%d][%d] = %.2f\n", wrong,
           ROWS * COLS, (double)p.data[5], ROWS - 1, COLS - 1, (double)p.data[ROWS * COLS - 1]);
    /* float32 sums may round differently on another device: 1e-6 relative. */
    const double err = ((double)total - want_total) / want_total;
    printf("sum(y) = %.1f (expected %.1f, relative error %.1e)\n", (double)total, want_total, err);

    out.versioned->deleter(out.versioned); /* the consumer is done */
    cm_tensor_release(sum);
    cm_tensor_release(one);
    cm_tensor_release(two);
    cm_tensor_release(x);
    cm_device_release(device);
    /* The deleter runs once Metal lets go of the memory too: its command
     * buffers may hold the wrapping MTLBuffer a little after they complete,
     * and then the deleter runs on Metal's thread. Until then the producer
     * keeps its array. */
    for (int ms = 0; ms < 5000 && atomic_load(&p.deleter_calls) == 0; ++ms)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    const int calls = atomic_load(&p.deleter_calls);
    printf("producer's deleter ran %d time(s) after the last cmetal reference\n", calls);
    const int ok = wrong == 0 && err < 1e-6 && err > -1e-6 && calls == 1;
    free(p.data);
    printf("%s\n", ok ? "demo: all numbers right, nothing copied" : "demo: FAILED");
    return ok ? 0 : 1;
}
