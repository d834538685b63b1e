/* SPDX-License-Identifier: MIT */
/* cmetal-dlpack-bench: nanoseconds per DLPack export + import + release of
 * a CPU tensor, legacy and versioned, for sizes from 1 KiB to 1 GiB. The
 * round trip shares memory, so its time must not grow with the size.
 *
 * Usage: cmetal-dlpack-bench [--clock] [max_bytes]   (default 1 GiB)
 * Output: one line per size: bytes, ns legacy, ns versioned (median of 5
 * batches). tools/dlpack_bench.py runs it beside NumPy and PyTorch.
 * --clock adds two columns: ns per step of one dependent multiply-add
 * chain (latency-bound) and of eight xor-shift-add chains side by side
 * (bound by the integer ALUs' throughput), timed right after the size's
 * trips, so that a slow round trip can be told from a slow or shared core.
 *
 *        cmetal-dlpack-bench --calls N
 * runs N legacy and N versioned round trips of a 1 KiB tensor untimed, for
 * instruction counts under `valgrind --tool=callgrind` (divide by 2N). */
#include <cmetal/cmetal.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void check(cm_status s, const char *what) {
    if (s != CM_OK) {
        fprintf(stderr, "cmetal-dlpack-bench: %s: %s\n", what, cm_last_error());
        exit(1);
    }
}

static void round_trip(const cm_tensor *t, const cm_dlpack_export_desc *desc) {
    cm_dlpack_managed m;
    cm_tensor *back = NULL;
    check(cm_dlpack_export(t, desc, &m), "export");
    if (m.versioned != NULL)
        check(cm_dlpack_import_versioned(m.versioned, NULL, &back), "import");
    else
        check(cm_dlpack_import(m.legacy, NULL, &back), "import");
    cm_tensor_release(back); /* runs the export's deleter */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over 5 batches of the time per round trip. */
static double measure(const cm_tensor *t, const cm_dlpack_export_desc *desc) {
    long iterations = 1000;
    for (;;) { /* size a batch to about 20 ms */
        double t0 = now_ns();
        for (long i = 0; i < iterations; ++i)
            round_trip(t, desc);
        if (now_ns() - t0 > 2e7 || iterations > (1L << 26))
            break;
        iterations *= 2;
    }
    double batch[5];
    for (int b = 0; b < 5; ++b) {
        double t0 = now_ns();
        for (long i = 0; i < iterations; ++i)
            round_trip(t, desc);
        batch[b] = (now_ns() - t0) / (double)iterations;
    }
    qsort(batch, 5, sizeof batch[0], cmp_double);
    return batch[2];
}

/* ns per step of a dependent 64-bit multiply-add chain (lanes 1: bound by
 * a multiply's and an add's latency), or of eight xor-shift-add chains in
 * general registers side by side (lanes 8: bound by the integer ALUs'
 * throughput, which a core shares with a busy sibling thread); median of
 * 5 runs of 2^20 steps. */
static volatile uint64_t chain_seed = 1, chain_sink;
static double chain_ns(int lanes) {
    double runs[5];
    for (int r = 0; r < 5; ++r) {
        uint64_t x[8];
        for (int k = 0; k < 8; ++k)
            x[k] = chain_seed + (uint64_t)k;
        const double t0 = now_ns();
        if (lanes == 1) {
            for (int i = 0; i < (1 << 20); ++i)
                x[0] = x[0] * 6364136223846793005u + 1442695040888963407u;
        } else {
            for (int i = 0; i < (1 << 20); ++i) {
                for (int k = 0; k < 8; ++k)
                    x[k] = (x[k] ^ (x[k] >> 7)) + 0x9e3779b97f4a7c15u;
#if defined(__GNUC__) || defined(__clang__)
                /* in general registers, one step at a time: not vectorised */
                __asm__ volatile("" : "+r"(x[0]), "+r"(x[1]), "+r"(x[2]), "+r"(x[3]));
                __asm__ volatile("" : "+r"(x[4]), "+r"(x[5]), "+r"(x[6]), "+r"(x[7]));
#endif
            }
        }
        runs[r] = (now_ns() - t0) / (double)(1 << 20);
        chain_sink = x[0] ^ x[7];
    }
    qsort(runs, 5, sizeof runs[0], cmp_double);
    return runs[2];
}

int main(int argc, char **argv) {
    const bool clock_col = argc > 1 && strcmp(argv[1], "--clock") == 0;
    if (clock_col) { /* the rest as without it */
        argv[1] = argv[0];
        --argc;
        ++argv;
    }
    cm_device *cpu = NULL;
    check(cm_device_open(CM_DEVICE_CPU, 0, &cpu), "cm_device_open");
    /* usage: cmetal-dlpack-bench [--clock] [MAX_BYTES] | --calls N */
    unsigned long long value = 0;
    if (argc > 1) {
        const bool calls_form = strcmp(argv[1], "--calls") == 0;
        const char *what = calls_form ? "--calls" : "MAX_BYTES";
        const char *number = calls_form ? (argc > 2 ? argv[2] : NULL) : argv[1];
        char *end = NULL;
        errno = 0;
        if (number != NULL)
            value = strtoull(number, &end, 0);
        const char *problem =
            argc > (calls_form ? 3 : 2)        ? "unexpected argument"
            : number == NULL                   ? "needs a value"
            : !calls_form && argv[1][0] == '-' ? "unknown argument"
            : end == number || *end != '\0' || errno != 0 || value < 1 || number[0] == '-'
                ? "expected a whole number >= 1"
                : NULL;
        if (problem != NULL) {
            if (argc > (calls_form ? 3 : 2))
                fprintf(stderr, "cmetal-dlpack-bench: %s '%s'\n", problem,
                        argv[calls_form ? 3 : 2]);
            else if (number == NULL)
                fprintf(stderr, "cmetal-dlpack-bench: %s %s\n", what, problem);
            else if (!calls_form && argv[1][0] == '-')
                fprintf(stderr, "cmetal-dlpack-bench: %s '%s'\n", problem, argv[1]);
            else
                fprintf(stderr, "cmetal-dlpack-bench: %s '%s': %s\n", what, number, problem);
            fprintf(stderr, "usage: cmetal-dlpack-bench [--clock] [MAX_BYTES] | --calls N\n");
            cm_device_release(cpu);
            return 2;
        }
    }
    if (argc > 2) {
        const long calls = (long)value;
        const int64_t shape[1] = {256};
        cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
        cm_tensor *t = NULL;
        check(cm_tensor_create(cpu, &td, &t), "cm_tensor_create");
        cm_dlpack_export_desc legacy = {0};
        cm_dlpack_export_desc versioned = {.max_version = {1, 0}};
        for (long i = 0; i < calls; ++i) {
            round_trip(t, &legacy);
            round_trip(t, &versioned);
        }
        cm_tensor_release(t);
        cm_device_release(cpu);
        return 0;
    }
    unsigned long long max_bytes = argc > 1 ? value : (1ull << 30);
    printf(clock_col ? "# bytes ns_legacy ns_versioned ns_chain1_step ns_alu8_step\n"
                     : "# bytes ns_legacy ns_versioned\n");
    for (unsigned long long bytes = 1024; bytes <= max_bytes; bytes *= 4) {
        const int64_t shape[1] = {(int64_t)(bytes / sizeof(float))};
        cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
        cm_tensor *t = NULL;
        check(cm_tensor_create(cpu, &td, &t), "cm_tensor_create");
        cm_dlpack_export_desc legacy = {0};
        cm_dlpack_export_desc versioned = {.max_version = {1, 0}};
        double l = measure(t, &legacy);
        double v = measure(t, &versioned);
        if (clock_col)
            printf("%llu %.1f %.1f %.3f %.3f\n", bytes, l, v, chain_ns(1), chain_ns(8));
        else
            printf("%llu %.1f %.1f\n", bytes, l, v);
        fflush(stdout);
        cm_tensor_release(t);
    }
    cm_device_release(cpu);
    return 0;
}
