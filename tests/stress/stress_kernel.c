/* SPDX-License-Identifier: MIT */
/* Concurrency of custom kernels on the Metal device (softmetal on Linux):
 * threads compile the same and different sources at once, make kernels,
 * share one body kernel whose variants they create concurrently, and
 * dispatch on their own streams and on the default one while cmetal's ops
 * (which use the same cache) run too, with a pipeline cache on disk that
 * threads save while others record pipelines in it. Plain program; ctest runs it,
 * tools/ci/stage-35-tsan.sh runs it under ThreadSanitizer. */
#include <cmetal/cmetal.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 12
#define N 128

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #cond, cm_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cm_device *device;
static cm_body_kernel *shared_body;

static const char *const sources[2] = {
    "kernel void put(device float *y [[buffer(0)]], constant float &v [[buffer(1)]],\n"
    "                uint i [[thread_position_in_grid]]) { y[i] = v + float(i); }\n",
    "kernel void put(device float *y [[buffer(0)]], constant float &v [[buffer(1)]],\n"
    "                uint i [[thread_position_in_grid]]) { y[i] = v + float(i) + 0.0f; }\n",
};

static void *worker(void *p) {
    const int me = (int)(intptr_t)p;
    cm_stream *stream = NULL;
    REQUIRE(cm_stream_create(device, &stream) == CM_OK);
    const int64_t n = N;
    for (int r = 0; r < ROUNDS; ++r) {
        cm_library *lib = NULL;
        cm_kernel *k = NULL;
        REQUIRE(cm_library_create(device, &(cm_library_desc){.source = sources[(me + r) % 2]},
                                  &lib) == CM_OK);
        REQUIRE(cm_kernel_create(lib, &(cm_kernel_desc){.name = "put"}, &k) == CM_OK);
        cm_library_release(lib);
        cm_tensor *y = NULL, *z = NULL;
        const cm_dtype zt = r % 2 ? CM_FLOAT32 : CM_FLOAT16;
        REQUIRE(cm_tensor_create(device,
                                 &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n},
                                 &y) == CM_OK);
        REQUIRE(cm_tensor_create(device, &(cm_tensor_desc){.dtype = zt, .ndim = 1, .shape = &n},
                                 &z) == CM_OK);
        cm_stream *s = r % 3 == 0 ? NULL : stream;
        const float v = (float)(me * 1000 + r);
        REQUIRE(cm_kernel_dispatch(
                    k, s,
                    &(cm_dispatch_desc){
                        .args =
                            (cm_kernel_arg[]){
                                {.type = CM_ARG_OUTPUT, .tensor = y},
                                {.type = CM_ARG_BYTES, .index = 1, .data = &v, .size = sizeof v}},
                        .arg_count = 2,
                        .grid = {N}}) == CM_OK);
        /* z = y * 0.5 through the shared body kernel (a variant per dtype of z). */
        const float half = 0.5f;
        REQUIRE(cm_body_kernel_dispatch(
                    shared_body, s,
                    &(cm_body_dispatch_desc){
                        .inputs = (const cm_tensor *[]){y},
                        .outputs = (cm_tensor *[]){z},
                        .template_args =
                            &(cm_template_arg){.name = "F", .dtype = CM_FLOAT32, .value = &half},
                        .template_arg_count = 1,
                        .grid = {N}}) == CM_OK);
        const double one = 1;
        cm_tensor *w = NULL;
        REQUIRE(cm_tensor_create(device,
                                 &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n},
                                 &w) == CM_OK);
        REQUIRE(cm_fill(w, CM_FLOAT64, &one, s) == CM_OK); /* an op beside the kernels */
        REQUIRE(cm_binary(CM_BINARY_ADD, y, w, w, s) == CM_OK);
        const float *py = NULL, *pw = NULL;
        REQUIRE(cm_tensor_host_read(w, CM_FLOAT32, (const void **)&pw) == CM_OK);
        REQUIRE(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&py) == CM_OK);
        for (int i = 0; i < N; ++i)
            REQUIRE(py[i] == v + (float)i && pw[i] == v + (float)i + 1.0f);
        if (zt == CM_FLOAT32) {
            float z0 = 0;
            REQUIRE(cm_tensor_get_element(z, (int64_t[]){1}, CM_FLOAT32, &z0) == CM_OK);
            REQUIRE(z0 == (v + 1.0f) * 0.5f);
        }
        cm_tensor_release(w);
        cm_tensor_release(z);
        cm_tensor_release(y);
        cm_kernel_release(k);
        if (r % 4 == me % 4)
            REQUIRE(cm_device_save_pipeline_cache(device) == CM_OK);
    }
    cm_stream_release(stream);
    return NULL;
}

int main(void) {
    if (cm_device_open(CM_DEVICE_METAL, 0, &device) != CM_OK) {
        printf("stress_kernel: no Metal device (%s); skipped\n", cm_last_error());
        return 0;
    }
    char archive[64];
    snprintf(archive, sizeof archive, "/tmp/stress-kernel-%d.pipelines", (int)getpid());
    REQUIRE(cm_device_set_pipeline_cache(device, archive) == CM_OK);
    REQUIRE(
        cm_body_kernel_create(
            device,
            &(cm_body_kernel_desc){.name = "halve",
                                   .input_names = (const char *[]){"y"},
                                   .input_count = 1,
                                   .output_names = (const char *[]){"z"},
                                   .output_count = 1,
                                   .body = "uint i = thread_position_in_grid.x; z[i] = y[i] * F;"},
            &shared_body) == CM_OK);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; ++i)
        REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; ++i)
        pthread_join(th[i], NULL);
    cm_body_kernel_release(shared_body);
    REQUIRE(cm_device_synchronize(device) == CM_OK);
    REQUIRE(cm_device_save_pipeline_cache(device) == CM_OK);
    cm_device_release(device);
    unlink(archive);
    printf("stress_kernel: %d threads x %d rounds clean\n", THREADS, ROUNDS);
    return 0;
}
