/* SPDX-License-Identifier: MIT */
/* read-roofline: how fast one core reads memory, beside memcpy of the same
 * bytes in the same process (x86-64 Linux, AVX2; not part of the build).
 *
 *   gcc -O2 -std=c11 -mavx2 -o read-roofline tools/bench/read_roofline.c
 *   ./read-roofline [MiB] [reps] [extra]
 *
 * A buffer of MiB (default 256) is read with AVX2 loads added into 64-bit
 * integer lanes (no float latency in the way), split into K streams side
 * by side (K = 1, 2, 4, 8, 16: K contiguous parts, a chunk of each in
 * turn), with software prefetch of each 64-byte line D bytes ahead in its
 * stream (prefetcht0 or prefetchnta), on 4 KiB pages (MADV_NOHUGEPAGE) and
 * on transparent huge pages (MADV_HUGEPAGE on a 2 MiB-aligned mapping).
 * Each figure is the best of `reps` runs alternated with memcpy of the
 * same size between two buffers of the same kind of pages; the ratio is
 * read GB/s over memcpy GB/s counted both ways (cmetal-bench's ratio for
 * a reduction). Also prints the THP setting and AnonHugePages used.
 * `extra`: instead, on 4 KiB pages, prefetcht1/t2 at 1-8 KiB, a near t0 with
 * a far t2, and streams interleaved 64 B to 8 KiB at a time. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE_2M ((size_t)2 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A 2 MiB-aligned anonymous mapping of `size` bytes, advised huge or not,
 * filled (faulted in) with a pattern. */
static char *map_buf(size_t size, int huge) {
    const size_t span = size + HUGE_2M;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *p = (char *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0)
        perror("madvise");
    for (size_t i = 0; i < size; ++i)
        p[i] = (char)(i * 131u + 7u);
    return p;
}

static volatile uint64_t sink;

enum { H_NONE, H_T0, H_T1, H_T2, H_NTA };
static const char *const hint_names[] = {"-", "t0", "t1", "t2", "nta"};

/* One chunk's lines added into a0/a1, each line's prefetch `dist` bytes
 * ahead with HINT, and a second one `dist2` bytes ahead (prefetcht2) when
 * dist2 > 0. */
#define READ_LINES(HINT)                                                                           \
    for (; q < end; q += 64) {                                                                     \
        _mm_prefetch(q + dist, HINT);                                                              \
        if (dist2 != 0)                                                                            \
            _mm_prefetch(q + dist2, _MM_HINT_T2);                                                  \
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)q));            \
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(q + 32)));     \
    }

/* k streams over [p, p + size): stream j reads part j, `chunk` bytes of
 * each stream in turn; prefetch `dist` bytes ahead with `hint`. */
__attribute__((target("avx2"))) static void read_k(const char *p, size_t size, int k, size_t chunk,
                                                   size_t dist, int hint, size_t dist2) {
    const size_t part = size / (size_t)k;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (size_t off = 0; off < part; off += chunk)
        for (int j = 0; j < k; ++j) {
            const char *q = p + (size_t)j * part + off;
            const char *end = q + chunk;
            switch (hint) {
            case H_NONE:
                for (; q < end; q += 64) {
                    a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)q));
                    a1 = _mm256_add_epi64(
                        a1, _mm256_load_si256((const __m256i *)(const void *)(q + 32)));
                }
                break;
            case H_T0: READ_LINES(_MM_HINT_T0) break;
            case H_T1: READ_LINES(_MM_HINT_T1) break;
            case H_T2: READ_LINES(_MM_HINT_T2) break;
            default: READ_LINES(_MM_HINT_NTA) break;
            }
        }
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)(void *)l, _mm256_add_epi64(a0, a1));
    sink = l[0] + l[1] + l[2] + l[3];
}

/* Best of reps: the read (k streams, chunk, prefetch) against memcpy. */
static void measure(const char *pages, char *src, char *dst, size_t size, int reps, int k,
                    size_t chunk, size_t dist, int hint, size_t dist2) {
    double best_r = 1e30, best_m = 1e30;
    read_k(src, size, k, chunk, dist, hint, dist2);
    for (int r = 0; r < reps; ++r) {
        double t0 = now_s();
        memcpy(dst, src, size);
        double t = now_s() - t0;
        if (t < best_m)
            best_m = t;
        t0 = now_s();
        read_k(src, size, k, chunk, dist, hint, dist2);
        t = now_s() - t0;
        if (t < best_r)
            best_r = t;
    }
    const double rbw = (double)size / best_r, mbw = 2.0 * (double)size / best_m;
    printf("%-5s %3d %6zu %6zu %4s %6zu %9.2f %9.2f %6.2f\n", pages, k, chunk, dist,
           hint_names[hint], dist2, rbw * 1e-9, mbw * 1e-9, rbw / mbw);
    fflush(stdout);
}

static void print_thp(void) {
    const char *files[] = {"/sys/kernel/mm/transparent_hugepage/enabled",
                           "/sys/kernel/mm/transparent_hugepage/defrag"};
    for (size_t i = 0; i < 2; ++i) {
        FILE *f = fopen(files[i], "r");
        char line[256] = "(unreadable)";
        if (f != NULL) {
            if (fgets(line, sizeof line, f) == NULL)
                strcpy(line, "(empty)");
            fclose(f);
        }
        line[strcspn(line, "\n")] = 0;
        printf("%s: %s\n", files[i], line);
    }
}

static void print_anon_huge(const char *when) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "AnonHugePages:", 14) == 0)
            printf("%s %s", when, line);
    if (f != NULL)
        fclose(f);
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    const int extra = argc > 3 && strcmp(argv[3], "extra") == 0; /* the second sweep only */
    const size_t size = mib << 20;
    print_thp();
    static const int ks[] = {1, 2, 4, 8, 16};
    static const size_t dists[] = {0, 512, 1024, 2048, 4096, 8192, 16384};
    printf("%-5s %3s %6s %6s %4s %6s %9s %9s %6s\n", "pages", "k", "chunk", "dist", "hint", "dist2",
           "read GB/s", "memcpy", "ratio");
    for (int huge = 0; huge < (extra ? 1 : 2); ++huge) {
        char *src = map_buf(size, huge), *dst = map_buf(size, huge);
        const char *pages = huge ? "thp" : "4k";
        print_anon_huge(huge ? "thp:" : "4k: ");
        if (extra) {
            /* Prefetch into L2 (t1, t2), a far t2 beside a near t0, and
             * how the streams interleave (64 B to 8 KiB at a time). */
            static const size_t xd[] = {1024, 4096, 8192};
            for (int k = 1; k <= 4; k *= 2) {
                for (size_t di = 0; di < 3; ++di)
                    for (int hint = H_T1; hint <= H_T2; ++hint)
                        measure(pages, src, dst, size, reps, k, 2048, xd[di], hint, 0);
                measure(pages, src, dst, size, reps, k, 2048, 1024, H_T0, 8192);
                measure(pages, src, dst, size, reps, k, 2048, 2048, H_T0, 16384);
                measure(pages, src, dst, size, reps, k, 2048, 4096, H_T0, 0);
                if (k > 1)
                    for (size_t chunk = 64; chunk <= 8192; chunk *= 4)
                        measure(pages, src, dst, size, reps, k, chunk, 4096, H_T0, 0);
            }
        } else {
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ++ki)
                for (size_t di = 0; di < sizeof dists / sizeof dists[0]; ++di)
                    for (int nta = 0; nta < (dists[di] == 0 ? 1 : 2); ++nta)
                        measure(pages, src, dst, size, reps, ks[ki], 2048, dists[di],
                                dists[di] == 0 ? H_NONE
                                : nta          ? H_NTA
                                               : H_T0,
                                0);
        }
        munmap(src, size); /* the 2 MiB-aligned part; the slack stays mapped */
        munmap(dst, size);
    }
    return 0;
}
