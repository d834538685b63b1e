/* SPDX-License-Identifier: MIT */
/* Metal figures of cmetal-bench: what our runtime costs around the GPU.
 * On softmetal (Linux) they characterise cmetal's overhead on a software
 * Metal, not Apple hardware; the output says so. No timing is asserted. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#if defined(__APPLE__)
#define _DARWIN_C_SOURCE 1 /* mkdtemp beside _XOPEN_SOURCE */
#endif
#include "bench_metal.h"

#include <cmetal/cmetal.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double bm_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bm_die(const char *what, cm_status s) {
    fprintf(stderr, "cmetal-bench: %s: %s (%s)\n", what, cm_status_name(s), cm_last_error());
    exit(1);
}
#define BM_TRY(expr)                                                                               \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        if (s_ != CM_OK)                                                                           \
            bm_die(#expr, s_);                                                                     \
    } while (0)

typedef struct bm_row {
    const char *name;
    double value;
    const char *unit;
    const char *note;
} bm_row;

/* The GPU time (GPUStartTime..GPUEndTime of its command buffers) the
 * device's default stream has counted so far. */
static double bm_gpu_seconds(cm_device *dev) {
    cm_stream *s = NULL;
    cm_stream_gpu_time g;
    BM_TRY(cm_device_get_stream(dev, &s));
    BM_TRY(cm_stream_get_gpu_time(s, &g));
    return g.seconds;
}

/* Seconds per op for `total` small adds, synchronising every `per_sync`;
 * *gpu: the GPU time per op of their command buffers. */
static double bm_dispatch(cm_device *dev, int total, int per_sync, double *gpu) {
    const int64_t shape[1] = {256};
    cm_tensor_desc desc = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
    cm_tensor *a = NULL, *b = NULL;
    BM_TRY(cm_tensor_create(dev, &desc, &a));
    BM_TRY(cm_tensor_create(dev, &desc, &b));
    const double one = 1.0;
    BM_TRY(cm_fill(a, CM_FLOAT64, &one, NULL));
    BM_TRY(cm_binary(CM_BINARY_ADD, a, a, b, NULL)); /* warm-up: compiles the kernels */
    BM_TRY(cm_device_synchronize(dev));
    const double g0 = bm_gpu_seconds(dev);
    const double t0 = bm_now();
    for (int i = 0; i < total; ++i) {
        BM_TRY(cm_binary(CM_BINARY_ADD, a, a, b, NULL));
        if ((i + 1) % per_sync == 0)
            BM_TRY(cm_device_synchronize(dev));
    }
    BM_TRY(cm_device_synchronize(dev));
    const double t = (bm_now() - t0) / total;
    *gpu = (bm_gpu_seconds(dev) - g0) / total;
    cm_tensor_release(a);
    cm_tensor_release(b);
    return t;
}

/* Seconds per custom kernel dispatch (y = x + x over 256 f32) for `total`
 * dispatches, synchronising every `per_sync`; `body` uses a body-only
 * kernel (its source is generated and looked up at every call). */
static double bm_kernel_dispatch(cm_device *dev, int total, int per_sync, bool body, double *gpu) {
    const int64_t shape[1] = {256};
    cm_tensor_desc desc = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
    cm_tensor *a = NULL, *b = NULL;
    BM_TRY(cm_tensor_create(dev, &desc, &a));
    BM_TRY(cm_tensor_create(dev, &desc, &b));
    cm_library *lib = NULL;
    cm_kernel *k = NULL;
    cm_body_kernel *bk = NULL;
    BM_TRY(cm_library_create(
        dev,
        &(cm_library_desc){
            .source =
                "kernel void add2(device const float *x [[buffer(0)]], device float *y "
                "[[buffer(1)]],\n"
                "                 uint i [[thread_position_in_grid]]) { y[i] = x[i] + x[i]; }\n"},
        &lib));
    BM_TRY(cm_kernel_create(lib, &(cm_kernel_desc){.name = "add2"}, &k));
    BM_TRY(cm_body_kernel_create(
        dev,
        &(cm_body_kernel_desc){.name = "add2b",
                               .input_names = (const char *[]){"x"},
                               .input_count = 1,
                               .output_names = (const char *[]){"y"},
                               .output_count = 1,
                               .body = "uint i = thread_position_in_grid.x; y[i] = x[i] + x[i];"},
        &bk));
    const cm_kernel_arg args[2] = {{.type = CM_ARG_INPUT, .index = 0, .tensor = a},
                                   {.type = CM_ARG_OUTPUT, .index = 1, .tensor = b}};
    const cm_dispatch_desc dd = {.args = args, .arg_count = 2, .grid = {256}};
    const cm_body_dispatch_desc bd = {
        .inputs = (const cm_tensor *[]){a}, .outputs = (cm_tensor *[]){b}, .grid = {256}};
    BM_TRY(body ? cm_body_kernel_dispatch(bk, NULL, &bd) : cm_kernel_dispatch(k, NULL, &dd));
    BM_TRY(cm_device_synchronize(dev));
    const double g0 = bm_gpu_seconds(dev);
    const double t0 = bm_now();
    for (int i = 0; i < total; ++i) {
        BM_TRY(body ? cm_body_kernel_dispatch(bk, NULL, &bd) : cm_kernel_dispatch(k, NULL, &dd));
        if ((i + 1) % per_sync == 0)
            BM_TRY(cm_device_synchronize(dev));
    }
    BM_TRY(cm_device_synchronize(dev));
    const double t = (bm_now() - t0) / total;
    *gpu = (bm_gpu_seconds(dev) - g0) / total;
    cm_body_kernel_release(bk);
    cm_kernel_release(k);
    cm_library_release(lib);
    cm_tensor_release(a);
    cm_tensor_release(b);
    return t;
}

/* Seconds to make a library and kernel of a source no earlier run has
 * seen (cold: the framework compiles), of the same source on a new device
 * (warm start: the device's cache is empty, the framework's own on-disk
 * cache is not; softmetal keeps compiled kernels there), and again on that
 * device (cmetal's per-device cache). */
static void bm_start(double *cold, double *warm, double *cached) {
    char source[512];
    snprintf(source, sizeof source,
             "// bench nonce %.9f\n"
             "kernel void nonce(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]])"
             " { y[i] = float(i); }\n",
             bm_now());
    double *out[3] = {cold, warm, cached};
    cm_device *dev = NULL;
    for (int pass = 0; pass < 3; ++pass) {
        if (pass < 2)
            BM_TRY(cm_device_open(CM_DEVICE_METAL, 0, &dev));
        const double t0 = bm_now();
        cm_library *lib = NULL;
        cm_kernel *k = NULL;
        BM_TRY(cm_library_create(dev, &(cm_library_desc){.source = source}, &lib));
        BM_TRY(cm_kernel_create(lib, &(cm_kernel_desc){.name = "nonce"}, &k));
        *out[pass] = bm_now() - t0;
        cm_kernel_release(k);
        cm_library_release(lib);
        if (pass != 1) {
            cm_device_release(dev);
            dev = NULL;
        }
    }
}

/* Seconds of the parts of one program start (see bm_program_starts). */
typedef struct bm_start_parts {
    double open, set_cache, library, kernel, save, total;
} bm_start_parts;

/* One program start in this (new) process: open the device, opt into the
 * pipeline cache `archive`, make a library and kernel, save the cache. */
static bm_start_parts bm_one_start(const char *archive, const char *source) {
    bm_start_parts p;
    const double t0 = bm_now();
    cm_device *dev = NULL;
    BM_TRY(cm_device_open(CM_DEVICE_METAL, 0, &dev));
    const double t1 = bm_now();
    BM_TRY(cm_device_set_pipeline_cache(dev, archive));
    const double t2 = bm_now();
    cm_library *lib = NULL;
    cm_kernel *k = NULL;
    BM_TRY(cm_library_create(dev, &(cm_library_desc){.source = source}, &lib));
    const double t3 = bm_now();
    BM_TRY(cm_kernel_create(lib, &(cm_kernel_desc){.name = "nonce"}, &k));
    const double t4 = bm_now();
    BM_TRY(cm_device_save_pipeline_cache(dev));
    const double t5 = bm_now();
    p = (bm_start_parts){t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0};
    cm_kernel_release(k);
    cm_library_release(lib);
    cm_device_release(dev);
    return p;
}

static int bm_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* The cold and warm start of a program with a pipeline cache on disk, each
 * in a new process (fork) whose softmetal kernel cache is a new, empty
 * directory (SOFTMETAL_CACHE_DIR), so that only the pipeline cache file
 * carries compiled code from the first start to the second. On a Mac the
 * variable does nothing and the OS's own shader cache is not emptied. */
static void bm_program_starts(bm_start_parts *cold, bm_start_parts *warm) {
    char root[] = "/tmp/cmetal-bench-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("cmetal-bench: mkdtemp");
        exit(1);
    }
    char archive[64], source[512];
    snprintf(archive, sizeof archive, "%s/pipelines.bin", root);
    snprintf(source, sizeof source,
             "// bench start nonce %.9f\n"
             "kernel void nonce(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]])"
             " { y[i] = float(i); }\n",
             bm_now());
    bm_start_parts *out[2] = {cold, warm};
    for (int pass = 0; pass < 2; ++pass) {
        char cache[64];
        snprintf(cache, sizeof cache, "%s/kernels-%d", root, pass);
        int fds[2];
        if (mkdir(cache, 0700) != 0 || pipe(fds) != 0) {
            perror("cmetal-bench: program start");
            exit(1);
        }
        fflush(stdout);
        const pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            setenv("SOFTMETAL_CACHE_DIR", cache, 1);
            const bm_start_parts p = bm_one_start(archive, source);
            _exit(write(fds[1], &p, sizeof p) == (ssize_t)sizeof p ? 0 : 1);
        }
        close(fds[1]);
        const ssize_t got = pid > 0 ? read(fds[0], out[pass], sizeof *out[pass]) : -1;
        close(fds[0]);
        int status = 1;
        if (pid > 0)
            waitpid(pid, &status, 0);
        if (got != (ssize_t)sizeof *out[pass] || status != 0) {
            fprintf(stderr, "cmetal-bench: the program start in a child process failed\n");
            exit(1);
        }
    }
    nftw(root, bm_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static double bm_alloc(cm_device *dev, cm_storage_mode storage, size_t size, int reps) {
    const double t0 = bm_now();
    for (int i = 0; i < reps; ++i) {
        cm_buffer *buf = NULL;
        BM_TRY(cm_buffer_create(dev, &(cm_buffer_desc){.size = size, .storage = storage}, &buf));
        cm_buffer_release(buf);
    }
    return (bm_now() - t0) / reps;
}

/* Seconds per round of a loop that creates, fills and releases float32
 * tensors of 1 Ki, 64 Ki and 256 Ki elements, with the device's buffer
 * cache at its default limit or off (cache limit 0). */
static double bm_alloc_loop(cm_device *dev, bool cache, int rounds) {
    uint64_t limit = 0;
    if (!cache)
        BM_TRY(cm_device_set_cache_limit(dev, 0, &limit));
    static const int64_t sizes[] = {1 << 10, 1 << 16, 1 << 18};
    const float one = 1;
    const double t0 = bm_now();
    for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
            cm_tensor *t = NULL;
            BM_TRY(cm_tensor_create(
                dev, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &sizes[i]}, &t));
            BM_TRY(cm_fill(t, CM_FLOAT32, &one, NULL));
            cm_tensor_release(t); /* waits for the fill */
        }
    const double t = (bm_now() - t0) / rounds;
    if (!cache)
        BM_TRY(cm_device_set_cache_limit(dev, limit, NULL));
    return t;
}

/* Seconds per round of a loop that makes BM_SMALL small float32 tensors
 * (4 B to 4 KiB), fills them, then releases them all: with the cache on
 * and cleared at the end of each round (every buffer is new and comes
 * from a heap; every byte is given back), or with the cache off (each its
 * own MTLBuffer). *made gets the Metal allocations of a round. */
enum { BM_SMALL = 256 };
static double bm_small_loop(cm_device *dev, bool cache, int rounds, double *made) {
    uint64_t limit = 0;
    if (!cache)
        BM_TRY(cm_device_set_cache_limit(dev, 0, &limit));
    cm_memory_info m0, m1;
    BM_TRY(cm_device_get_memory_info(dev, &m0));
    const float one = 1;
    double t = 0;
    BM_TRY(cm_device_clear_cache(dev));
    for (int r = 0; r < rounds; ++r) {
        const double t0 = bm_now();
        cm_tensor *ts[BM_SMALL];
        for (int i = 0; i < BM_SMALL; ++i) {
            const int64_t n = (int64_t)1 << (i % 11);
            BM_TRY(cm_tensor_create(
                dev, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &ts[i]));
            BM_TRY(cm_fill(ts[i], CM_FLOAT32, &one, NULL));
        }
        for (int i = 0; i < BM_SMALL; ++i)
            cm_tensor_release(ts[i]);       /* waits for the fills */
        BM_TRY(cm_device_clear_cache(dev)); /* every byte back, as with the cache off */
        t += bm_now() - t0;
    }
    BM_TRY(cm_device_get_memory_info(dev, &m1));
    *made = (double)(m1.allocations - m0.allocations) / rounds;
    if (!cache)
        BM_TRY(cm_device_set_cache_limit(dev, limit, NULL));
    return t / rounds;
}

static double bm_best(int reps, double (*fn)(void *), void *ctx) {
    fn(ctx);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t = fn(ctx);
        best = t < best ? t : best;
    }
    return best;
}

typedef struct bm_copy {
    cm_buffer *buf;
    void *host, *other;
    size_t bytes;
    int mode; /* 0 memcpy, 1 write (to device), 2 read */
} bm_copy;

static double bm_copy_once(void *p) {
    bm_copy *c = p;
    const double t0 = bm_now();
    if (c->mode == 0)
        memcpy(c->other, c->host, c->bytes);
    else if (c->mode == 1)
        BM_TRY(cm_buffer_write(c->buf, 0, c->host, c->bytes));
    else
        BM_TRY(cm_buffer_read(c->buf, 0, c->host, c->bytes));
    return bm_now() - t0;
}

int bench_metal(bool json, long mib, int reps) {
    double start_cold, start_warm, start_cached;
    /* First, so that the children start as new processes would: nothing
     * loaded, nothing compiled (softmetal keeps its compiler's identity per
     * process). */
    bm_start_parts prog_cold, prog_warm;
    bm_program_starts(&prog_cold, &prog_warm);
    bm_start(&start_cold, &start_warm, &start_cached); /* before any device is held */
    cm_device *dev = NULL;
    BM_TRY(cm_device_open(CM_DEVICE_METAL, 0, &dev));
    cm_device_info info;
    BM_TRY(cm_device_get_info(dev, &info));
    const size_t bytes = (size_t)mib << 20;
    bm_copy c = {.bytes = bytes, .host = malloc(bytes), .other = malloc(bytes)};
    if (c.host == NULL || c.other == NULL) {
        fprintf(stderr, "cmetal-bench: no memory for %ld MiB\n", mib);
        return 1;
    }
    memset(c.host, 1, bytes);
    memset(c.other, 2, bytes);
    BM_TRY(cm_buffer_create(dev, &(cm_buffer_desc){.size = bytes, .storage = CM_STORAGE_PRIVATE},
                            &c.buf));
    c.mode = 0;
    const double t_memcpy = bm_best(reps, bm_copy_once, &c);
    c.mode = 1;
    const double t_write = bm_best(reps, bm_copy_once, &c);
    c.mode = 2;
    const double t_read = bm_best(reps, bm_copy_once, &c);
    cm_buffer_release(c.buf);
    free(c.host);
    free(c.other);

    double g1, g64, gk64, gb64; /* GPU time per op, from the command buffers */
    const double d1 = bm_dispatch(dev, 256, 1, &g1), d64 = bm_dispatch(dev, 1024, 64, &g64);
    (void)bm_alloc_loop(dev, true, 4); /* compiles the fill */
    const double loop_off = bm_alloc_loop(dev, false, 100);
    const double loop_on = bm_alloc_loop(dev, true, 100);
    double made_off = 0, made_heaps = 0;
    const double small_off = bm_small_loop(dev, false, 20, &made_off);
    const double small_heaps = bm_small_loop(dev, true, 20, &made_heaps);
    const double k64 = bm_kernel_dispatch(dev, 1024, 64, false, &gk64);
    const double b64 = bm_kernel_dispatch(dev, 1024, 64, true, &gb64);
    const bm_row rows[] = {
        {"dispatch, 1 op per sync", d1 * 1e6, "us/op", "add of 256 f32, commit + wait each"},
        {"  GPU time, 1 op per sync", g1 * 1e6, "us/op",
         "GPUStartTime..GPUEndTime of the command buffers"},
        {"  GPU / wall, 1 op per sync", g1 / d1, "ratio", "the rest is cmetal and the host"},
        {"dispatch, 64 ops per sync", d64 * 1e6, "us/op", "one command buffer per 64 ops"},
        {"  GPU time, 64 ops per sync", g64 * 1e6, "us/op", ""},
        {"  GPU / wall, 64 ops per sync", g64 / d64, "ratio", ""},
        {"batching speed-up", d1 / d64, "x", "1-per-sync time / 64-per-sync time"},
        {"custom kernel dispatch, 64 per sync", k64 * 1e6, "us/op",
         "cm_kernel_dispatch of y = x + x, 256 f32"},
        {"  GPU time, custom kernel", gk64 * 1e6, "us/op", ""},
        {"custom kernel / op dispatch", k64 / d64, "ratio", "beside the add op, 64 per sync"},
        {"body kernel dispatch, 64 per sync", b64 * 1e6, "us/op",
         "cm_body_kernel_dispatch: source generated and looked up per call"},
        {"  GPU time, body kernel", gb64 * 1e6, "us/op", ""},
        {"body kernel / op dispatch", b64 / d64, "ratio", ""},
        {"kernel start, cold", start_cold * 1e3, "ms", "a new source: the framework compiles"},
        {"kernel start, warm", start_warm * 1e3, "ms",
         "same source, new device, same process: the framework's kernel cache"},
        {"kernel start, cached", start_cached * 1e6, "us", "same device: cmetal's cache"},
        {"cold / warm start", start_cold / start_warm, "x", ""},
        {"program start, cold", prog_cold.total * 1e3, "ms",
         "new process, empty kernel cache, no pipeline cache file: compiles"},
        {"program start, warm", prog_warm.total * 1e3, "ms",
         "new process, empty kernel cache, the pipeline cache file of the cold start"},
        {"cold / warm program start", prog_cold.total / prog_warm.total, "x", ""},
        {"  cold: device open", prog_cold.open * 1e3, "ms", ""},
        {"  cold: library create", prog_cold.library * 1e3, "ms", "the compile"},
        {"  cold: pipeline cache save", prog_cold.save * 1e3, "ms", ""},
        {"  warm: device open", prog_warm.open * 1e3, "ms", ""},
        {"  warm: pipeline cache load", prog_warm.set_cache * 1e3, "ms",
         "cm_device_set_pipeline_cache"},
        {"  warm: library create", prog_warm.library * 1e3, "ms",
         "code from the archive: compiler identity, write, dlopen"},
        {"  warm: kernel create", prog_warm.kernel * 1e3, "ms", ""},
        {"  warm: pipeline cache save", prog_warm.save * 1e3, "ms", "rewrites the file"},
        {"buffer create+release, 1 MiB shared",
         bm_alloc(dev, CM_STORAGE_SHARED, 1 << 20, 200) * 1e6, "us", "buffer cache on"},
        {"buffer create+release, 1 MiB private",
         bm_alloc(dev, CM_STORAGE_PRIVATE, 1 << 20, 200) * 1e6, "us", "buffer cache on"},
        {"alloc+fill+free loop, cache on", loop_on * 1e6, "us",
         "tensors of 4 KiB, 256 KiB, 1 MiB per round"},
        {"alloc+fill+free loop, cache off", loop_off * 1e6, "us", "cache limit 0"},
        {"cache off / cache on", loop_off / loop_on, "x", "the same loop"},
        {"256 small tensors, new buffers, heaps", small_heaps * 1e6, "us",
         "4 B..4 KiB each, make+fill+free, then clear_cache"},
        {"  Metal allocations per round, heaps", made_heaps, "count", "MTLHeaps made"},
        {"256 small tensors, cache off", small_off * 1e6, "us", "each its own MTLBuffer"},
        {"  Metal allocations per round, cache off", made_off, "count", "MTLBuffers made"},
        {"cache off / heaps, small tensors", small_off / small_heaps, "x", "the same loop"},
        {"host -> device (private) / memcpy", t_memcpy / t_write, "ratio",
         "cm_buffer_write: staging + blit + wait"},
        {"device (private) -> host / memcpy", t_memcpy / t_read, "ratio",
         "cm_buffer_read: blit + wait + copy out"},
    };
    const size_t n = sizeof rows / sizeof rows[0];
    const char *caveat = info.software
                             ? "software Metal (softmetal): these figures characterise cmetal's "
                               "overhead, not Apple hardware"
                             : "Apple Metal";
    if (json) {
        printf("{\"device\": {\"type\": \"metal\", \"name\": \"%s\", \"software\": %s},\n",
               info.name, info.software ? "true" : "false");
        printf(" \"note\": \"%s\",\n \"mib\": %ld, \"reps\": %d,\n", caveat, mib, reps);
        printf(" \"memcpy\": {\"seconds\": %.6g},\n \"cases\": [\n", t_memcpy);
        for (size_t i = 0; i < n; ++i)
            printf("  {\"name\": \"%s\", \"value\": %.4g, \"unit\": \"%s\"}%s\n", rows[i].name,
                   rows[i].value, rows[i].unit, i + 1 < n ? "," : "");
        printf(" ]}\n");
    } else {
        printf("cmetal-bench on the Metal device %s, %ld MiB transfers, best of %d\n", info.name,
               mib, reps);
        printf("NOTE: %s.\n", caveat);
        printf("memcpy of %ld MiB: %.2f ms\n\n", mib, t_memcpy * 1e3);
        printf("%-40s %10s %6s  %s\n", "figure", "value", "unit", "note");
        for (size_t i = 0; i < n; ++i)
            printf("%-40s %10.2f %6s  %s\n", rows[i].name, rows[i].value, rows[i].unit,
                   rows[i].note);
    }
    cm_device_release(dev);
    return 0;
}
