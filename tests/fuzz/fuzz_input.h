/* SPDX-License-Identifier: MIT */
/* Reads typed values from fuzz input; past the end everything reads 0. */
#ifndef CMETAL_TESTS_FUZZ_INPUT_H
#define CMETAL_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct fuzz_input {
    const uint8_t *data;
    size_t size;
} fuzz_input;

static inline uint64_t fuzz_bytes(fuzz_input *in, size_t n) {
    uint64_t v = 0;
    size_t take = n < in->size ? n : in->size;
    memcpy(&v, in->data, take);
    in->data += take;
    in->size -= take;
    return v;
}
static inline uint8_t fuzz_u8(fuzz_input *in) {
    return (uint8_t)fuzz_bytes(in, 1);
}
static inline uint16_t fuzz_u16(fuzz_input *in) {
    return (uint16_t)fuzz_bytes(in, 2);
}
static inline uint64_t fuzz_u64(fuzz_input *in) {
    return fuzz_bytes(in, 8);
}
static inline int64_t fuzz_i64(fuzz_input *in) {
    return (int64_t)fuzz_bytes(in, 8);
}

/* Mostly small values (-4..27), sometimes extreme ones. */
static inline int64_t fuzz_small_i64(fuzz_input *in) {
    uint8_t b = fuzz_u8(in);
    if (b < 240)
        return (int64_t)(b % 32) - 4;
    switch (b & 7) {
    case 0: return INT64_MAX;
    case 1: return INT64_MIN;
    case 2: return INT64_MAX / 2 + 1;
    case 3: return -(INT64_MAX / 3);
    default: return fuzz_i64(in);
    }
}

#endif
