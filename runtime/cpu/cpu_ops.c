/* SPDX-License-Identifier: MIT */
/* CPU ops: fill, copy (memcpy runs and tiled transposes), and dispatch of
 * cast, elementwise and reduce kernels, split across the device's threads
 * when large (cpu_pool.c). The N-d iteration is in cpu_nd.c. */
#include "cpu_ops.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ fill */

#define CM__TYPED_LOOP(T, n, dst, ds, STMT_VALUE)                                                  \
    do {                                                                                           \
        if ((ds) == (int64_t)sizeof(T)) {                                                          \
            T *d_ = (T *)(void *)(dst);                                                            \
            for (int64_t i_ = 0; i_ < (n); ++i_)                                                   \
                d_[i_] = STMT_VALUE;                                                               \
        } else {                                                                                   \
            for (int64_t i_ = 0; i_ < (n); ++i_)                                                   \
                *(T *)(void *)((dst) + i_ * (ds)) = STMT_VALUE;                                    \
        }                                                                                          \
    } while (0)

typedef struct cm__fill_ctx {
    size_t size;
    const uint8_t *value;
    bool bytes_equal; /* every byte of the value is value[0] */
    bool streaming;   /* contiguous runs with non-temporal stores (cm__fill_streaming) */
    size_t min_run;   /* of at least this many bytes (partial lines stream slowly) */
} cm__fill_ctx;

static bool cm__fill_streaming(char *dst, int64_t n, const cm__fill_ctx *c);

/* A strided fill of a large destination: its lines are only partly
 * written, so each is read before its stores retire, and the few lines the
 * store buffer holds at once (several stores each) kept a 16-core Xeon at
 * 0.33 of memset of the same bytes on one core (0.53 at 16 threads); asking
 * for each line 4 KiB ahead reached 0.54 (0.76). Lines past the end are
 * only prefetched, which never faults. */
#define CM__STRIDED_AHEAD(T, n, dst, ds, value)                                                    \
    do {                                                                                           \
        const int64_t step_ = (ds) > 0 ? (ds) : -(ds);                                             \
        const int64_t per_line_ = step_ < 64 ? 64 / step_ : 1, ahead_ = 4096 / step_ + 1;          \
        for (int64_t i_ = 0; i_ < (n); i_ += per_line_) {                                          \
            __builtin_prefetch(                                                                    \
                (const void *)((uintptr_t)(dst) + (uintptr_t)((i_ + ahead_) * (ds))), 1);          \
            const int64_t end_ = i_ + per_line_ < (n) ? i_ + per_line_ : (n);                      \
            for (int64_t k_ = i_; k_ < end_; ++k_)                                                 \
                *(T *)(void *)((dst) + k_ * (ds)) = (value);                                       \
        }                                                                                          \
    } while (0)

/* The fill value as T (its `size` bytes) stored by LOOP at n places ds
 * bytes apart. */
#define CM__FILL_AS(T, LOOP)                                                                       \
    do {                                                                                           \
        T v_;                                                                                      \
        memcpy(&v_, c->value, sizeof v_);                                                          \
        LOOP(T, n, dst, ds, v_);                                                                   \
    } while (0)
#define CM__FILL_CASE(T)                                                                           \
    if (ahead)                                                                                     \
        CM__FILL_AS(T, CM__STRIDED_AHEAD);                                                         \
    else                                                                                           \
        CM__FILL_AS(T, CM__TYPED_LOOP);                                                            \
    break

static void cm__fill_elements(int64_t n, char *dst, int64_t ds, const cm__fill_ctx *c, bool ahead) {
    switch (c->size) {
    case 1: CM__FILL_CASE(uint8_t);
    case 2: CM__FILL_CASE(uint16_t);
    case 4: CM__FILL_CASE(uint32_t);
    default: CM__FILL_CASE(uint64_t);
    }
}
#undef CM__FILL_CASE
#undef CM__FILL_AS

static void cm__fill_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__fill_ctx *c = ctx;
    if (c->streaming && s[0] == (int64_t)c->size && (size_t)n * c->size >= c->min_run &&
        cm__fill_streaming(p[0], n, c))
        return;
    if (c->bytes_equal && s[0] == (int64_t)c->size) {
        memset(p[0], c->value[0], (size_t)n * c->size);
        return;
    }
    /* a large destination's partly written lines are asked for ahead */
    cm__fill_elements(n, p[0], s[0], c, c->streaming && s[0] != (int64_t)c->size && s[0] != 0);
}

/* ------------------------------------------------------------ copy */

static void cm__copy_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const size_t size = *(const size_t *)ctx;
    const int64_t isz = (int64_t)size;
    if (s[0] == isz && s[1] == isz) {
        memcpy(p[0], p[1], (size_t)n * size);
        return;
    }
    const char *src = p[1];
    const int64_t ss = s[1];
#define CM__COPY_CASE(T)                                                                           \
    if (ss == 0) {                                                                                 \
        const T v_ = *(const T *)(const void *)src;                                                \
        CM__TYPED_LOOP(T, n, p[0], s[0], v_);                                                      \
    } else if (ss == isz) {                                                                        \
        const T *s_ = (const T *)(const void *)src;                                                \
        CM__TYPED_LOOP(T, n, p[0], s[0], s_[i_]);                                                  \
    } else {                                                                                       \
        CM__TYPED_LOOP(T, n, p[0], s[0], *(const T *)(const void *)(src + i_ * ss));               \
    }
    switch (size) {
    case 1: CM__COPY_CASE(uint8_t) break;
    case 2: CM__COPY_CASE(uint16_t) break;
    case 4: CM__COPY_CASE(uint32_t) break;
    default: CM__COPY_CASE(uint64_t) break;
    }
#undef CM__COPY_CASE
}

/* Transposing copy of the last two axes: dst is contiguous along the last
 * axis (j) and src along the one before (i), so dst[i][j] = src[j][i].
 *
 * Memory, not arithmetic, sets the speed: every byte should cross from
 * DRAM once, in whole cache lines, with the next misses already in
 * flight. The matrix is walked in square tiles of 256-byte row pieces
 * (cm__tile_side elements a side):
 *   1. the tile of src is transposed into a small contiguous buffer with
 *      register micro-tiles (16-byte vectors: 16x16 bytes, 8x8 2-byte,
 *      4x4 4-byte, 2x2 8-byte elements; scalar on the ragged edges);
 *   2. each buffer row is stored to its dst row piece in one wide copy,
 *      and beside it one row piece of the next tile's src is prefetched,
 *      so that its DRAM misses overlap this tile's stores.
 * Reading src straight into registers (no buffer) or copying src pieces
 * first and gathering afterwards were measured slower: the power-of-two
 * row strides of large matrices map whole tiles onto a few cache sets.
 * For a 64 MiB float32 matrix about half the time is step 1 (as fast as
 * memcpy reads) and half the stores of step 2, whose lines are read for
 * ownership first (memcpy's non-temporal stores are not). On a device with
 * threads each thread transposes a slab of the outer or row axis with its
 * own tile buffer. */
typedef struct cm__tile_ctx {
    size_t size;
    int64_t rows, cols; /* i: dst rows (src's contiguous axis); j: dst's contiguous axis */
    int64_t drow, scol; /* byte strides: dst along i, src along j */
    unsigned char *buf; /* a tile, rows padded (cm__buffer_row) */
    bool streaming;     /* dst pieces of whole cache lines bypass the caches */
} cm__tile_ctx;

/* ------------------------------------------------------------ streaming stores
 * A destination several times larger than the core's L2 cache is stored
 * with non-temporal stores (x86-64, SSE2): its lines would leave the
 * core's caches before any reuse anyway, and this way they are not read
 * for ownership first, nor do the scattered row pieces wait on those
 * reads. On a 16-core Xeon this made the 64 MiB transpose three times
 * faster (0.26 -> 0.8 of memcpy), and 8 MiB ones faster too; on the EPYC
 * development VM twice as fast. glibc's memcpy streams large copies too.
 * The L2, not the last-level cache: virtual machines report the host's L3
 * (300 MiB on that Xeon, 320 MiB on the EPYC VM, whose real L3 is 32 MiB).
 * Pieces that are not whole, aligned cache lines use ordinary stores.
 * Elsewhere: ordinary stores. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#include <unistd.h>
#define CM__HAVE_STREAMING 1

/* `bytes` (a multiple of 64) from the 64-byte aligned `src` to the 64-byte
 * aligned `dst`. */
static void cm__store_streaming(char *dst, const unsigned char *src, size_t bytes) {
    for (size_t k = 0; k < bytes; k += 64) {
        const __m128i a = _mm_load_si128((const __m128i *)(const void *)(src + k));
        const __m128i b = _mm_load_si128((const __m128i *)(const void *)(src + k + 16));
        const __m128i c = _mm_load_si128((const __m128i *)(const void *)(src + k + 32));
        const __m128i d = _mm_load_si128((const __m128i *)(const void *)(src + k + 48));
        _mm_stream_si128((__m128i *)(void *)(dst + k), a);
        _mm_stream_si128((__m128i *)(void *)(dst + k + 16), b);
        _mm_stream_si128((__m128i *)(void *)(dst + k + 32), c);
        _mm_stream_si128((__m128i *)(void *)(dst + k + 48), d);
    }
}

/* Orders the streaming stores before whatever follows the op. */
static void cm__streaming_fence(void) {
    _mm_sfence();
}

/* Destinations above this many bytes stream: four L2 caches, or 8 MiB
 * where the system does not tell the L2 (sysconf's _SC_LEVEL2_CACHE_SIZE
 * is glibc's; macOS has no such name). */
static size_t cm__streaming_threshold(void) {
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
    const long l2 = 0;
#endif
    return l2 >= (256L << 10) ? 4u * (size_t)l2 : (size_t)8 << 20;
}
#endif

/* 0: by size (auto); 1: always; -1: never. A test and benchmark hook. */
static atomic_int cm__streaming_mode;

void cm__cpu_copy_force_streaming(int mode) {
    atomic_store_explicit(&cm__streaming_mode, mode, memory_order_relaxed);
}

/* Whether a transpose writing `dst_bytes` uses streaming stores. */
static bool cm__use_streaming(size_t dst_bytes) {
#if defined(CM__HAVE_STREAMING)
    const int mode = atomic_load_explicit(&cm__streaming_mode, memory_order_relaxed);
    if (mode != 0)
        return mode > 0;
    static atomic_size_t threshold; /* 0: not asked yet (asking twice is harmless) */
    size_t bytes = atomic_load_explicit(&threshold, memory_order_relaxed);
    if (bytes == 0) {
        bytes = cm__streaming_threshold();
        atomic_store_explicit(&threshold, bytes, memory_order_relaxed);
    }
    return dst_bytes > bytes;
#else
    (void)dst_bytes;
    return false;
#endif
}

/* A contiguous fill of a destination above the streaming threshold (see
 * above): the value repeated in a 16-byte vector, stored non-temporally
 * from the first 16-byte boundary; the ragged ends with ordinary stores.
 * A fill otherwise reads every destination line for ownership before
 * writing it, which doubled its memory traffic: 0.34-0.41 of memcpy on a
 * 16-core Xeon, where memset (which avoids those reads) measured about
 * twice as fast. false: not done (no streaming stores here). */
static bool cm__fill_streaming(char *dst, int64_t n, const cm__fill_ctx *c) {
#if defined(CM__HAVE_STREAMING)
    const size_t size = c->size, bytes = (size_t)n * size;
    unsigned char pattern[16];
    for (size_t k = 0; k < sizeof pattern; k += size)
        memcpy(pattern + k, c->value, size);
    /* Elements are aligned to their size, which divides 16: the head is
     * whole elements, and so is the tail. */
    size_t head = (16 - (uintptr_t)dst % 16) % 16;
    if (head > bytes)
        head = bytes;
    memcpy(dst, pattern, head);
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)pattern);
    char *q = dst + head;
    size_t left = bytes - head;
    for (; left >= 64; q += 64, left -= 64) {
        _mm_stream_si128((__m128i *)(void *)q, v);
        _mm_stream_si128((__m128i *)(void *)(q + 16), v);
        _mm_stream_si128((__m128i *)(void *)(q + 32), v);
        _mm_stream_si128((__m128i *)(void *)(q + 48), v);
    }
    for (; left >= 16; q += 16, left -= 16)
        _mm_stream_si128((__m128i *)(void *)q, v);
    memcpy(q, pattern, left); /* the pattern repeats every 16 bytes from dst */
    return true;
#else
    (void)dst, (void)n, (void)c;
    return false;
#endif
}

/* One dst row piece from the tile buffer. */
static void cm__store_piece(const cm__tile_ctx *c, char *dst, const unsigned char *src,
                            size_t bytes) {
#if defined(CM__HAVE_STREAMING)
    if (c->streaming && ((uintptr_t)dst | bytes) % 64 == 0) {
        cm__store_streaming(dst, src, bytes);
        return;
    }
#else
    (void)c;
#endif
    memcpy(dst, src, bytes);
}

#define CM__PIECE_BYTES 256
#define CM__VECTOR_BYTES 16

/* Elements per tile side: row pieces of 256 bytes. Shorter pieces measured
 * slower for every element size (fewer bytes per DRAM page and TLB entry),
 * and so did longer ones for 4-byte elements (the tile leaves L1). */
static int64_t cm__tile_side(size_t size) {
    return CM__PIECE_BYTES / (int64_t)size;
}

#if defined(__GNUC__) || defined(__clang__)
#define CM__PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define CM__PREFETCH(p) ((void)(p))
#endif

#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define CM__HAVE_SHUFFLE 1
#endif
#endif

#if defined(CM__HAVE_SHUFFLE)
/* Micro-tile loops are unrolled whole, so that the rows stay in registers. */
#define CM__UNROLL _Pragma("GCC unroll 16")
/* Interleaves of the low and high halves of two vectors. */
#define CM__LO_1 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define CM__HI_1 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#define CM__LO_2 0, 8, 1, 9, 2, 10, 3, 11
#define CM__HI_2 4, 12, 5, 13, 6, 14, 7, 15
#define CM__LO_4 0, 4, 1, 5
#define CM__HI_4 2, 6, 3, 7
#define CM__LO_8 0, 2
#define CM__HI_8 1, 3
/* An N x N micro-tile (N = 16 / sizeof(T)) in registers: N src rows of one
 * vector in, N buffer rows out. log2(N) rounds of pairing row k with row
 * k + N/2 (low halves interleaved to 2k, high halves to 2k + 1) transpose
 * it. */
#define CM__MICRO_TILE(T, LO, HI)                                                                  \
    static inline void cm__micro_tile_##T(char *restrict out, int64_t out_row,                     \
                                          const char *restrict in, int64_t in_row) {               \
        typedef T vec_ __attribute__((vector_size(CM__VECTOR_BYTES)));                             \
        enum { N_ = CM__VECTOR_BYTES / sizeof(T) };                                                \
        vec_ v[N_], w[N_];                                                                         \
        CM__UNROLL for (int r = 0; r < N_; ++r) memcpy(&v[r], in + r * in_row, sizeof v[r]);       \
        CM__UNROLL for (int round = 1; round < N_; round *= 2) {                                   \
            CM__UNROLL for (int k = 0; k < N_ / 2; ++k) {                                          \
                w[2 * k] = __builtin_shufflevector(v[k], v[k + N_ / 2], LO);                       \
                w[2 * k + 1] = __builtin_shufflevector(v[k], v[k + N_ / 2], HI);                   \
            }                                                                                      \
            memcpy(v, w, sizeof v);                                                                \
        }                                                                                          \
        CM__UNROLL for (int r = 0; r < N_; ++r) memcpy(out + r * out_row, &v[r], sizeof v[r]);     \
    }
#else
/* Without vector shuffles: the same micro-tile, element by element. */
#define CM__MICRO_TILE(T, LO, HI)                                                                  \
    static inline void cm__micro_tile_##T(char *restrict out, int64_t out_row,                     \
                                          const char *restrict in, int64_t in_row) {               \
        enum { N_ = CM__VECTOR_BYTES / sizeof(T) };                                                \
        for (int r = 0; r < N_; ++r)                                                               \
            for (int c = 0; c < N_; ++c)                                                           \
                memcpy(out + c * out_row + r * (int64_t)sizeof(T),                                 \
                       in + r * in_row + c * (int64_t)sizeof(T), sizeof(T));                       \
    }
#endif
CM__MICRO_TILE(uint8_t, CM__LO_1, CM__HI_1)
CM__MICRO_TILE(uint16_t, CM__LO_2, CM__HI_2)
CM__MICRO_TILE(uint32_t, CM__LO_4, CM__HI_4)
CM__MICRO_TILE(uint64_t, CM__LO_8, CM__HI_8)
#undef CM__MICRO_TILE

/* Elements per buffer row: a cache line more than a tile side, which
 * measured faster for large power-of-two strides. */
static int64_t cm__buffer_row(size_t size) {
    return cm__tile_side(size) + 64 / (int64_t)size;
}

/* buf[i][j] = src[j][i] over an ni x nj tile; buf rows are `row` elements
 * apart, src rows (j) scol bytes, src elements (i) contiguous. */
#define CM__TILE_TO_BUFFER(T)                                                                      \
    static void cm__tile_to_buffer_##T(T *buf, int64_t row, const char *src, int64_t scol,         \
                                       int64_t ni, int64_t nj) {                                   \
        enum { N_ = CM__VECTOR_BYTES / sizeof(T) };                                                \
        const int64_t brow = row * (int64_t)sizeof(T);                                             \
        int64_t j = 0;                                                                             \
        for (; j + N_ <= nj; j += N_) {                                                            \
            const char *s = src + j * scol;                                                        \
            int64_t i = 0;                                                                         \
            for (; i + N_ <= ni; i += N_)                                                          \
                cm__micro_tile_##T((char *)(buf + i * row + j), brow, s + i * (int64_t)sizeof(T),  \
                                   scol);                                                          \
            for (; i < ni; ++i) /* the ragged bottom rows of this column strip */                  \
                for (int64_t c = 0; c < N_; ++c)                                                   \
                    buf[i * row + j + c] =                                                         \
                        *(const T *)(const void *)(s + c * scol + i * (int64_t)sizeof(T));         \
        }                                                                                          \
        for (; j < nj; ++j) { /* the ragged right columns */                                       \
            const T *s = (const T *)(const void *)(src + j * scol);                                \
            for (int64_t i = 0; i < ni; ++i)                                                       \
                buf[i * row + j] = s[i];                                                           \
        }                                                                                          \
    }
CM__TILE_TO_BUFFER(uint8_t)
CM__TILE_TO_BUFFER(uint16_t)
CM__TILE_TO_BUFFER(uint32_t)
CM__TILE_TO_BUFFER(uint64_t)
#undef CM__TILE_TO_BUFFER

/* One 2-d transpose (one index of the outer axes). */
static void cm__tile_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__tile_ctx *c = ctx;
    (void)n; /* one call per outer index: the two transposed axes are not in nd */
    (void)s;
    char *dst = p[0];
    const char *src = p[1];
    const int64_t isz = (int64_t)c->size, side = cm__tile_side(c->size);
    const int64_t row = cm__buffer_row(c->size);
    unsigned char *buf = c->buf;
    for (int64_t bi = 0; bi < c->rows; bi += side) {
        const int64_t ni = c->rows - bi < side ? c->rows - bi : side;
        for (int64_t bj = 0; bj < c->cols; bj += side) {
            const int64_t nj = c->cols - bj < side ? c->cols - bj : side;
            const char *tile = src + bj * c->scol + bi * isz;
            void *b = buf;
            switch (c->size) {
            case 1: cm__tile_to_buffer_uint8_t(b, row, tile, c->scol, ni, nj); break;
            case 2: cm__tile_to_buffer_uint16_t(b, row, tile, c->scol, ni, nj); break;
            case 4: cm__tile_to_buffer_uint32_t(b, row, tile, c->scol, ni, nj); break;
            default: cm__tile_to_buffer_uint64_t(b, row, tile, c->scol, ni, nj); break;
            }
            /* The next tile in this walk: its src rows are prefetched one per
             * dst row stored. */
            int64_t next_bi = bi, next_bj = bj + side;
            if (next_bj >= c->cols) {
                next_bi = bi + side;
                next_bj = 0;
            }
            const bool prefetch = next_bi < c->rows;
            const int64_t next_ni = c->rows - next_bi < side ? c->rows - next_bi : side;
            const int64_t next_nj = c->cols - next_bj < side ? c->cols - next_bj : side;
            const char *next = src + next_bj * c->scol + next_bi * isz;
            char *out = dst + bi * c->drow + bj * isz;
            for (int64_t i = 0; i < ni; ++i) {
                /* rows i, i + ni, ...: all of them, even when ni < next_nj */
                for (int64_t r = i; prefetch && r < next_nj; r += ni)
                    for (int64_t line = 0; line < next_ni * isz; line += 64)
                        CM__PREFETCH(next + r * c->scol + line);
                cm__store_piece(c, out + i * c->drow, buf + i * row * isz, (size_t)(nj * isz));
            }
        }
    }
}

/* If the copy is a transpose of its two fastest axes, runs it tiled and
 * returns true: dst's last axis is contiguous, src's is not, and src is
 * contiguous (either direction) along another axis. */
static bool cm__copy_tiled(cm__cpu_nd *nd, size_t size) {
    const int64_t isz = (int64_t)size;
    const int32_t last = nd->ndim - 1;
    if ((size != 1 && size != 2 && size != 4 && size != 8) || nd->ndim < 2 ||
        nd->strides[0][last] != isz || cm__abs64(nd->strides[1][last]) == isz)
        return false;
    int32_t j = -1;
    for (int32_t k = last - 1; k >= 0; --k)
        if (cm__abs64(nd->strides[1][k]) == isz) {
            j = k;
            break;
        }
    if (j < 0)
        return false;
    /* The buffer: one tile of at most `side` rows of cm__buffer_row elements. */
    const int64_t side = cm__tile_side(size);
    size_t bytes = 0;
    if (cm__mul_overflow_size((size_t)(nd->shape[j] < side ? nd->shape[j] : side),
                              (size_t)cm__buffer_row(size), &bytes) ||
        cm__mul_overflow_size(bytes, size, &bytes))
        return false;
    unsigned char *buf = cm__alloc_raw(bytes, 64);
    if (buf == NULL)
        return false;            /* the element loop needs no memory */
    if (nd->strides[1][j] < 0) { /* walk axis j backwards in both operands */
        for (int32_t o = 0; o < 2; ++o) {
            nd->base[o] += (nd->shape[j] - 1) * nd->strides[o][j];
            nd->strides[o][j] = -nd->strides[o][j];
        }
    }
    /* Move axis j next to the last; other axes keep their order. */
    const int64_t rows = nd->shape[j], drow = nd->strides[0][j];
    for (int32_t k = j; k + 1 < last; ++k) {
        nd->shape[k] = nd->shape[k + 1];
        nd->strides[0][k] = nd->strides[0][k + 1];
        nd->strides[1][k] = nd->strides[1][k + 1];
    }
    /* The elements written (the layout was checked, so this cannot overflow). */
    size_t dst_bytes = size;
    for (int32_t k = 0; k <= last; ++k)
        dst_bytes *= (size_t)nd->shape[k];
    cm__tile_ctx c = {.size = size,
                      .rows = rows,
                      .cols = nd->shape[last],
                      .drow = drow,
                      .scol = nd->strides[1][last],
                      .buf = buf,
                      .streaming = cm__use_streaming(dst_bytes)};
    cm__cpu_nd outer = *nd;
    outer.ndim = last - 1;
    /* One call per index of the outer axes, through a size-1 inner axis. */
    outer.shape[outer.ndim] = 1;
    outer.strides[0][outer.ndim] = 0;
    outer.strides[1][outer.ndim] = 0;
    outer.ndim++;
    cm__cpu_nd_foreach(&outer, cm__tile_run, &c);
#if defined(CM__HAVE_STREAMING)
    if (c.streaming)
        cm__streaming_fence();
#endif
    cm__free(buf);
    return true;
}

/* ------------------------------------------------------------ elementwise */

/* f1_stream and f2_stream, where set, take the contiguous runs whose
 * output is at least min_run bytes (cm__use_streaming). */
typedef struct cm__map_ctx {
    cm__cpu_map1_fn f1, f1_stream;
    cm__cpu_map2_fn f2, f2_stream;
    int64_t osize, isize; /* element bytes of the output and the inputs */
    size_t min_run;
} cm__map_ctx;

static void cm__map1_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__map_ctx *c = ctx;
    if (c->f1_stream != NULL && s[0] == c->osize && s[1] == c->isize &&
        (size_t)n * (size_t)c->osize >= c->min_run)
        c->f1_stream(n, p[0], s[0], p[1], s[1]);
    else
        c->f1(n, p[0], s[0], p[1], s[1]);
}

static void cm__map2_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__map_ctx *c = ctx;
    if (c->f2_stream != NULL && s[0] == c->osize && s[1] == c->isize && s[2] == c->isize &&
        (size_t)n * (size_t)c->osize >= c->min_run)
        c->f2_stream(n, p[0], s[0], p[1], s[1], p[2], s[2]);
    else
        c->f2(n, p[0], s[0], p[1], s[1], p[2], s[2]);
}

/* ------------------------------------------------------------ entry */

static cm_status cm__cpu_operand(const cm__op *op, const char *name, const cm__operand *o,
                                 cm__cpu_nd *nd, int32_t index) {
    const cm_buffer *b = o->buffer;
    const int64_t size = (int64_t)cm__dtype(o->dtype)->size;
    if (b->host == NULL)
        return cm__fail_as(op->func, CM_ERR_NOT_HOST_VISIBLE,
                           "%s has no host memory, which the CPU device needs", name);
    char *base = (char *)b->host + o->byte_offset;
    if ((uintptr_t)base % (uintptr_t)size != 0)
        return cm__fail_as(op->func, CM_ERR_INVALID_ARGUMENT,
                           "%s data at %p is not aligned to its %" PRId64
                           "-byte elements, which the CPU device needs",
                           name, (void *)base, size);
    nd->base[index] = base;
    for (int32_t k = 0; k < op->ndim; ++k)
        nd->strides[index][k] = o->strides[k] * size;
    return CM_OK;
}

/* Part bodies (cm__cpu_nd_split). */
static void cm__fill_part(cm__cpu_nd *part, void *ctx) {
    cm__cpu_nd_foreach(part, cm__fill_run, ctx);
#if defined(CM__HAVE_STREAMING)
    if (((const cm__fill_ctx *)ctx)->streaming) /* each thread orders its own stores */
        cm__streaming_fence();
#endif
}

static void cm__copy_part(cm__cpu_nd *part, void *ctx) {
    if (!cm__copy_tiled(part, *(const size_t *)ctx))
        cm__cpu_nd_foreach(part, cm__copy_run, ctx);
}

static void cm__map1_part(cm__cpu_nd *part, void *ctx) {
    cm__cpu_nd_foreach(part, cm__map1_run, ctx);
#if defined(CM__HAVE_STREAMING)
    if (((const cm__map_ctx *)ctx)->f1_stream != NULL) /* each thread orders its own stores */
        cm__streaming_fence();
#endif
}

static void cm__map2_part(cm__cpu_nd *part, void *ctx) {
    cm__cpu_nd_foreach(part, cm__map2_run, ctx);
#if defined(CM__HAVE_STREAMING)
    if (((const cm__map_ctx *)ctx)->f2_stream != NULL) /* each thread orders its own stores */
        cm__streaming_fence();
#endif
}

/* Bytes an elementwise op touches: every element of the output and of
 * each input (broadcast inputs are counted as if whole, which only decides
 * whether to use threads). */
static int64_t cm__op_bytes(const cm__op *op) {
    int64_t per = (int64_t)cm__dtype(op->out.dtype)->size;
    for (int32_t i = 0; i < op->nin; ++i)
        per += (int64_t)cm__dtype(op->in[i].dtype)->size;
    int64_t bytes = 0;
    return cm__mul_overflow_i64(op->numel, per, &bytes) ? INT64_MAX : bytes;
}

/* Whether the output of a fill or an elementwise op (numel elements of
 * `size` bytes, which its buffer holds) streams; min_run: the
 * shortest contiguous run of output bytes that does (partial lines stream
 * slowly; forced streaming, a test hook, streams every run). */
static bool cm__stream_output(const cm__op *op, size_t size, size_t *min_run) {
    *min_run = atomic_load_explicit(&cm__streaming_mode, memory_order_relaxed) > 0 ? 0 : 4096;
    return cm__use_streaming((size_t)op->numel * size);
}

cm_status cm__cpu_run_op(cm_device *device, const cm__op *op) {
    cm__cpu_pool *pool = device->impl;
    cm__cpu_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.ndim = op->ndim;
    nd.nops = 1 + op->nin;
    memcpy(nd.shape, op->shape, sizeof nd.shape);
    CM__TRY(cm__cpu_operand(op, "the output", &op->out, &nd, 0));
    for (int32_t i = 0; i < op->nin; ++i)
        CM__TRY(cm__cpu_operand(op, i == 0 ? "the first input" : "the second input", &op->in[i],
                                &nd, i + 1));
    const size_t size = cm__dtype(op->out.dtype)->size;
    const int64_t bytes = cm__op_bytes(op);
    switch (op->kind) {
    case CM__OP_FILL: {
        cm__fill_ctx c = {.size = size, .value = op->value.bytes, .bytes_equal = true};
        for (size_t i = 1; i < size; ++i)
            c.bytes_equal = c.bytes_equal && c.value[i] == c.value[0];
        cm__cpu_nd_simplify(&nd, 0);
        /* Streaming when the whole destination is large (bytes counts the
         * elements written; a strided view's lines are only partly
         * written: ordinary stores, each line asked for ahead). */
        c.streaming = cm__stream_output(op, size, &c.min_run);
        cm__cpu_nd_split(pool, &nd, bytes, cm__fill_part, &c);
        return CM_OK;
    }
    case CM__OP_COPY: {
        cm__cpu_nd_simplify(&nd, 0);
        bool same = nd.base[0] == nd.base[1];
        for (int32_t k = 0; same && k < nd.ndim; ++k)
            same = nd.strides[0][k] == nd.strides[1][k];
        if (same) /* the identical view: nothing to do */
            return CM_OK;
        cm__cpu_nd_split(pool, &nd, bytes, cm__copy_part, (void *)&size);
        return CM_OK;
    }
    case CM__OP_CAST: {
        cm__map_ctx c = {.f1 = cm__cpu_cast_kernel(op->in[0].dtype, op->out.dtype),
                         .osize = (int64_t)size,
                         .isize = (int64_t)cm__dtype(op->in[0].dtype)->size};
        if (cm__stream_output(op, size, &c.min_run))
            c.f1_stream = cm__cpu_cast_stream_kernel(op->in[0].dtype, op->out.dtype);
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_split(pool, &nd, bytes, cm__map1_part, &c);
        return CM_OK;
    }
    case CM__OP_UNARY: {
        cm__map_ctx c = {.f1 = cm__cpu_unary_kernel((cm_unary_op)op->code, op->out.dtype),
                         .osize = (int64_t)size,
                         .isize = (int64_t)size};
        if (c.f1 == NULL)
            break;
        if (cm__stream_output(op, size, &c.min_run))
            c.f1_stream = cm__cpu_unary_stream_kernel((cm_unary_op)op->code, op->out.dtype);
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_split(pool, &nd, bytes, cm__map1_part, &c);
        return CM_OK;
    }
    case CM__OP_BINARY: {
        cm__map_ctx c = {.f2 = cm__cpu_binary_kernel((cm_binary_op)op->code, op->in[0].dtype),
                         .osize = (int64_t)size,
                         .isize = (int64_t)cm__dtype(op->in[0].dtype)->size};
        if (c.f2 == NULL)
            break;
        if (op->out.dtype == op->in[0].dtype && cm__stream_output(op, size, &c.min_run))
            c.f2_stream = cm__cpu_binary_stream_kernel((cm_binary_op)op->code, op->out.dtype);
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_split(pool, &nd, bytes, cm__map2_part, &c);
        return CM_OK;
    }
    case CM__OP_REDUCE: return cm__cpu_reduce(op, &nd, pool);
    }
    return cm__fail_as(op->func, CM_ERR_INTERNAL, "the CPU device has no kernel for op %d/%d",
                       (int)op->kind, (int)op->code);
}
