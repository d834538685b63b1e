/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), incremental: the kernel cache's keys (sm_compile.c).
 * Plain C, no state beyond the context. Thread-safety: a context is used by
 * one thread at a time. */
#ifndef SM_SHA256_H
#define SM_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  unsigned char d[32];
} sm_digest;

typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char block[64];
  size_t fill;
} sm_sha256;

void sm__sha256_init(sm_sha256 *s);
void sm__sha256_update(sm_sha256 *s, const void *p, size_t n);
void sm__sha256_final(sm_sha256 *s, sm_digest *out);
/* Lower-case hex of d (64 characters and a NUL). */
void sm__digest_hex(const sm_digest *d, char out[65]);

#endif
