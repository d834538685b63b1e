/* SPDX-License-Identifier: MIT */
/* The program that tools/size/size-report.sh measures, and that checks the
 * configuration it was built against.
 *
 * Minimal (default): a CPU tensor written from the host, exported through
 * DLPack and imported back: what a firmware-like tool that only hands
 * tensors around links. With -DPROBE_FULL it also runs ops, asks for custom
 * kernels and for the Metal device, so every part of the library is linked.
 *
 * Built with the macros of the parts the library left out (CMETAL_NO_CPU_OPS,
 * CMETAL_NO_METAL, CMETAL_NO_KERNELS, CMETAL_NO_DLPACK, as for the
 * amalgamation), it checks that those calls fail with CM_ERR_UNSUPPORTED and
 * a message naming the option, and that everything else works. Exit status
 * 0 when every check passed. */
#include <cmetal/cmetal.h>

#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "probe: %s:%d: %s failed (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, cm_last_error());                                                       \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

/* A call that must fail as left out: CM_ERR_UNSUPPORTED, the message naming
 * the public function and the option. */
static void expect_left_out(cm_status status, const char *func, const char *option) {
    const char *msg = cm_last_error();
    if (status != CM_ERR_UNSUPPORTED || strncmp(msg, func, strlen(func)) != 0 ||
        strstr(msg, option) == NULL) {
        fprintf(stderr, "probe: %s gave %s \"%s\"; expected CM_ERR_UNSUPPORTED naming %s\n", func,
                cm_status_name(status), msg, option);
        ++failures;
    }
}

/* Does the last error name a left-out option? (It must not when the part
 * is built in.) */
static void expect_not_left_out(const char *func) {
    if (strstr(cm_last_error(), "=OFF") != NULL) {
        fprintf(stderr, "probe: %s: \"%s\" names a left-out part of a full build\n", func,
                cm_last_error());
        ++failures;
    }
}

static void tensors_and_dlpack(cm_device *cpu) {
    const int64_t shape[1] = {4};
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(cpu, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = shape},
                           &t) == CM_OK);
    if (t == NULL)
        return;
    void *p = NULL;
    CHECK(cm_tensor_host_write(t, CM_FLOAT32, &p) == CM_OK);
    if (p != NULL)
        memcpy(p, (const float[4]){1, 2, 3, 4}, sizeof(float[4]));

    cm_dlpack_managed managed;
    cm_status status =
        cm_dlpack_export(t, &(cm_dlpack_export_desc){.copy = CM_COPY_NEVER}, &managed);
#ifdef CMETAL_NO_DLPACK
    expect_left_out(status, "cm_dlpack_export", "CMETAL_DLPACK=OFF");
    expect_left_out(cm_dlpack_import(NULL, NULL, &(cm_tensor *){NULL}), "cm_dlpack_import",
                    "CMETAL_DLPACK=OFF");
#else
    CHECK(status == CM_OK);
    if (status == CM_OK) {
        DLTensor *dl = &managed.legacy->dl_tensor;
        CHECK(dl->data == p && dl->ndim == 1 && dl->shape[0] == 4);
        CHECK(dl->device.device_type == kDLCPU);
        cm_tensor *back = NULL;
        CHECK(cm_dlpack_import(managed.legacy, NULL, &back) == CM_OK);
        float v = 0;
        CHECK(cm_tensor_get_element(back, (const int64_t[]){2}, CM_FLOAT32, &v) == CM_OK);
        CHECK(v == 3.0f);
        cm_tensor_release(back); /* runs the export's deleter */
    }
    /* A copy is made on the host, without the op kernels. */
    status = cm_dlpack_export(t, &(cm_dlpack_export_desc){.copy = CM_COPY_ALWAYS}, &managed);
    CHECK(status == CM_OK);
    if (status == CM_OK) {
        const float *c = managed.legacy->dl_tensor.data;
        CHECK(managed.copied && (const void *)c != p && c[3] == 4.0f);
        managed.legacy->deleter(managed.legacy);
    }
#endif
    cm_tensor_release(t);
}

#ifdef PROBE_FULL
static void ops(cm_device *cpu) {
    const int64_t shape[1] = {4};
    cm_tensor *a = NULL, *s = NULL, *h = NULL;
    CHECK(cm_tensor_create(cpu, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = shape},
                           &a) == CM_OK);
    CHECK(cm_tensor_create(cpu, &(cm_tensor_desc){.dtype = CM_FLOAT32}, &s) == CM_OK);
    CHECK(cm_tensor_create(cpu, &(cm_tensor_desc){.dtype = CM_FLOAT16, .ndim = 1, .shape = shape},
                           &h) == CM_OK);
    if (a == NULL || s == NULL || h == NULL)
        goto out;
    const float two = 2.0f;
#ifdef CMETAL_NO_CPU_OPS
    expect_left_out(cm_fill(a, CM_FLOAT32, &two, NULL), "cm_fill", "CMETAL_CPU_OPS=OFF");
    expect_left_out(cm_binary(CM_BINARY_ADD, a, a, a, NULL), "cm_binary", "CMETAL_CPU_OPS=OFF");
    expect_left_out(cm_unary(CM_UNARY_SQRT, a, a, NULL), "cm_unary", "CMETAL_CPU_OPS=OFF");
    expect_left_out(cm_reduce(CM_REDUCE_SUM, a, -1, s, NULL), "cm_reduce", "CMETAL_CPU_OPS=OFF");
    expect_left_out(cm_cast(a, h, NULL), "cm_cast", "CMETAL_CPU_OPS=OFF");
    expect_left_out(cm_copy(a, a, NULL), "cm_copy", "CMETAL_CPU_OPS=OFF");
#else
    CHECK(cm_fill(a, CM_FLOAT32, &two, NULL) == CM_OK);
    CHECK(cm_binary(CM_BINARY_ADD, a, a, a, NULL) == CM_OK);
    CHECK(cm_unary(CM_UNARY_SQRT, a, a, NULL) == CM_OK);
    CHECK(cm_reduce(CM_REDUCE_SUM, a, -1, s, NULL) == CM_OK);
    CHECK(cm_cast(a, h, NULL) == CM_OK);
    float total = 0;
    CHECK(cm_tensor_get_element(s, NULL, CM_FLOAT32, &total) == CM_OK);
    CHECK(total == 8.0f); /* 4 x sqrt(2 + 2) */
#endif
out:
    cm_tensor_release(a);
    cm_tensor_release(s);
    cm_tensor_release(h);
}

static void kernels(cm_device *cpu) {
    cm_library *lib = NULL;
    cm_body_kernel *body = NULL;
    const cm_library_desc desc = {.source = "kernel void k(device float *x [[buffer(0)]]) {}"};
    const char *outs[1] = {"y"};
    const cm_body_kernel_desc body_desc = {
        .name = "twice", .output_names = outs, .output_count = 1, .body = "y = 2;"};
#ifdef CMETAL_NO_KERNELS
    expect_left_out(cm_library_create(cpu, &desc, &lib), "cm_library_create", "CMETAL_KERNELS=OFF");
    expect_left_out(cm_body_kernel_create(cpu, &body_desc, &body), "cm_body_kernel_create",
                    "CMETAL_KERNELS=OFF");
    CHECK(cm_library_release(NULL) == CM_OK);
#else
    /* The CPU device runs no custom kernels; the build has them. */
    CHECK(cm_library_create(cpu, &desc, &lib) == CM_ERR_UNSUPPORTED);
    expect_not_left_out("cm_library_create");
    CHECK(cm_body_kernel_create(cpu, &body_desc, &body) == CM_ERR_UNSUPPORTED);
    expect_not_left_out("cm_body_kernel_create");
#endif
    CHECK(lib == NULL && body == NULL);
}

static void metal(cm_device *cpu) {
    uint32_t count = 99;
    CHECK(cm_device_count(CM_DEVICE_METAL, &count) == CM_OK);
    void *native = NULL;
#ifdef CMETAL_NO_METAL
    CHECK(count == 0);
    expect_left_out(cm_device_get_metal_device(cpu, &native), "cm_device_get_metal_device",
                    "CMETAL_METAL=OFF");
#else
    CHECK(cm_device_get_metal_device(cpu, &native) != CM_OK); /* the CPU is no Metal device */
    expect_not_left_out("cm_device_get_metal_device");
#endif
    CHECK(native == NULL);
}
#endif

int main(void) {
    (void)expect_left_out; /* which checks a configuration uses varies */
    (void)expect_not_left_out;
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu) == CM_OK);
    if (cpu == NULL)
        return 1;
    tensors_and_dlpack(cpu);
#ifdef PROBE_FULL
    ops(cpu);
    kernels(cpu);
    metal(cpu);
#endif
    cm_device_release(cpu);
    if (failures != 0) {
        fprintf(stderr, "probe: %d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
