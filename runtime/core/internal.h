/* SPDX-License-Identifier: MIT */
/* Internal helpers shared by every layer of cmetal: error reporting, checked
 * arithmetic, allocation and reference counts. Not installed. */
#ifndef CMETAL_CORE_INTERNAL_H
#define CMETAL_CORE_INTERNAL_H

#include <cmetal/status.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define CM__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define CM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define CM__PRINTF(fmt, args)
#define CM__UNLIKELY(x) (x)
#endif

/* Records "function: message" as the calling thread's last error and
 * returns `status`. The function name is taken from the caller. */
cm_status cm__fail_at(const char *func, cm_status status, const char *fmt, ...) CM__PRINTF(3, 4);
#define cm__fail(status, ...) cm__fail_at(__func__, (status), __VA_ARGS__)

/* Same, but with an explicit public function name, for helpers that report
 * on behalf of their public caller. */
#define cm__fail_as(func, status, ...) cm__fail_at((func), (status), __VA_ARGS__)

/* Sets the calling thread's last error to `text` as it is (to restore a
 * message saved from an earlier failure). */
void cm__set_last_error(const char *text);

/* One-line error paths. */
#define CM__TRY(expr)                                                                              \
    do {                                                                                           \
        cm_status cm__s_ = (expr);                                                                 \
        if (CM__UNLIKELY(cm__s_ != CM_OK))                                                         \
            return cm__s_;                                                                         \
    } while (0)

#define CM__REQUIRE_ARG(cond, ...)                                                                 \
    do {                                                                                           \
        if (CM__UNLIKELY(!(cond)))                                                                 \
            return cm__fail(CM_ERR_INVALID_ARGUMENT, __VA_ARGS__);                                 \
    } while (0)

#define CM__REQUIRE_NONNULL(ptr) CM__REQUIRE_ARG((ptr) != NULL, "%s = NULL must not be NULL", #ptr)

/* Checked arithmetic: return true on overflow. */
static inline bool cm__mul_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool cm__add_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool cm__mul_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool cm__add_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
/* n / d rounded up, for n >= 0 and d > 0, without forming n + d - 1. */
static inline int64_t cm__div_up_i64(int64_t n, int64_t d) {
    return n / d + (n % d != 0);
}

/* Allocation through the process allocator (cm_set_allocator). cm__alloc
 * returns zeroed memory aligned to `align` (power of two, >= alignof(max_align_t)
 * is applied automatically); cm__free takes NULL. */
void *cm__alloc(size_t size, size_t align);
void cm__free(void *ptr);
/* Whether the default allocator (malloc/aligned_alloc and free) is in use:
 * false from a cm_set_allocator with an allocator until one with NULL. */
extern bool cm__allocator_default;
static inline bool cm__allocator_is_default(void) {
    return cm__allocator_default;
}
#define CM__NEW(type) ((type *)cm__alloc(sizeof(type), _Alignof(type)))

/* Atomic reference counts: retain never fails; release returns true when the
 * count reached zero and the caller must destroy the object. */
typedef struct cm__refcount {
    atomic_uint_fast64_t count;
} cm__refcount;

static inline void cm__ref_init(cm__refcount *r) {
    atomic_init(&r->count, 1);
}
static inline void cm__ref_retain(cm__refcount *r) {
    atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
}
/* acq_rel rather than release plus an acquire fence: the same ordering,
 * and ThreadSanitizer understands it. A count of 1 seen with acquire means
 * the caller holds the only reference (new references are made only from
 * existing ones), so nobody else can change it: the last release then
 * needs no read-modify-write. */
static inline bool cm__ref_release(cm__refcount *r) {
    if (atomic_load_explicit(&r->count, memory_order_acquire) == 1)
        return true;
    return atomic_fetch_sub_explicit(&r->count, 1, memory_order_acq_rel) == 1;
}
static inline uint64_t cm__ref_count(const cm__refcount *r) {
    return atomic_load_explicit(&r->count, memory_order_relaxed);
}

#endif /* CMETAL_CORE_INTERNAL_H */
