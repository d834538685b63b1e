/* SPDX-License-Identifier: MIT */
/* softmetal device, buffers and shared events. */
#define _DEFAULT_SOURCE /* mincore */
#include <criterion/criterion.h>
#include <signal.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "softmetal/sm_test.h"

enum { PAGE = 16384 };
#define OPT_SHARED 0ul
#define OPT_MANAGED 16ul
#define OPT_PRIVATE 32ul
#define OPT_MEMORYLESS 48ul

static id dev;
static id volatile keep; /* reachable when a test aborts on purpose */
static void setup(void) { dev = MTLCreateSystemDefaultDevice(); }
static void teardown(void) {
  sm_release(dev);
  sm_check_all_released(__FILE__);
}
TestSuite(device, .init = setup, .fini = teardown);

static id new_buffer(NSUInteger len, NSUInteger opts) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len,
              opts);
}

static id new_nocopy(void *p, NSUInteger len, NSUInteger opts, void *block) {
  return SEND(id, (id, SEL, void *, NSUInteger, NSUInteger, void *), dev,
              "newBufferWithBytesNoCopy:length:options:deallocator:", p, len, opts, block);
}

Test(device, describes_itself) {
  cr_assert_not_null(dev);
  cr_assert_str_eq(sm_utf8(SEND0(id, dev, "name")), "softmetal (software Metal on the CPU)");
  cr_assert(SEND0(BOOL, dev, "hasUnifiedMemory") != 0);
  cr_assert_neq(SEND0(uint64_t, dev, "registryID"), 0);
  cr_assert_geq(sm_u(dev, "maxBufferLength"), (NSUInteger)1 << 30);
  cr_assert_gt(SEND0(uint64_t, dev, "recommendedMaxWorkingSetSize"), 0);
  MTLSize m = SEND0(MTLSize, dev, "maxThreadsPerThreadgroup");
  cr_assert_eq(m.width, 1024);
  cr_assert_eq(m.height, 1024);
  cr_assert_eq(m.depth, 1024);
  cr_assert(SEND(BOOL, (id, SEL, NSInteger), dev, "supportsFamily:", 1007) != 0);
  cr_assert(SEND(BOOL, (id, SEL, NSInteger), dev, "supportsFamily:", 5001) != 0);
  cr_assert(SEND(BOOL, (id, SEL, NSInteger), dev, "supportsFamily:", 5002) == 0);
  cr_assert(SEND(BOOL, (id, SEL, NSInteger), dev, "supportsFamily:", 42) == 0);
  id again = MTLCreateSystemDefaultDevice();
  cr_assert_eq(again, dev);
  cr_assert_eq(sm_u(dev, "retainCount"), 2);
  sm_release(again);
}

Test(device, shared_buffer_is_zeroed_and_counted) {
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 0);
  id b = new_buffer(100, OPT_SHARED);
  cr_assert_not_null(b);
  cr_assert_eq(sm_u(b, "length"), 100);
  cr_assert_eq(sm_u(b, "storageMode"), 0);
  unsigned char *p = SEND0(void *, b, "contents");
  cr_assert_not_null(p);
  for (int i = 0; i < 100; i++) cr_assert_eq(p[i], 0);
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), PAGE);
  sm_release(b);
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 0);
}

Test(device, private_buffer_has_no_contents) {
  id b = new_buffer(64, OPT_PRIVATE);
  cr_assert_eq(sm_u(b, "storageMode"), 2);
  cr_assert_null(SEND0(void *, b, "contents"));
  cr_assert_neq(SEND0(uint64_t, b, "gpuAddress"), 0);
  sm_release(b);
}

/* True when no byte of the page at addr is mapped in this process. */
static bool unmapped(uint64_t addr) {
  unsigned char vec[PAGE / 4096];
  return mincore((void *)(uintptr_t)(addr & ~(uint64_t)(PAGE - 1)), PAGE, vec) == -1 &&
         errno == ENOMEM;
}

Test(device, gpu_addresses_are_stable_unique_aligned_and_not_host_memory) {
  id priv = new_buffer(64, OPT_PRIVATE), shared = new_buffer(3 * PAGE, OPT_SHARED),
     managed = new_buffer(100, OPT_MANAGED);
  uint64_t ap = SEND0(uint64_t, priv, "gpuAddress"), as = SEND0(uint64_t, shared, "gpuAddress"),
           am = SEND0(uint64_t, managed, "gpuAddress");
  cr_assert_eq(SEND0(uint64_t, priv, "gpuAddress"), ap, "stable");
  cr_assert(ap != as && as != am && ap != am);
  cr_assert_eq(ap % 256, 0);
  cr_assert_eq(as % 256, 0);
  cr_assert_eq(am % 256, 0);
  cr_assert_neq(as, (uint64_t)(uintptr_t)SEND0(void *, shared, "contents"));
  /* Buffers do not overlap in the GPU's address space. */
  cr_assert(as + 3 * PAGE <= ap || ap + 64 <= as);
  cr_assert(unmapped(ap), "a private buffer's gpuAddress is not writable host memory");
  cr_assert(unmapped(as));
  cr_assert(unmapped(as + 2 * PAGE));
  cr_assert(unmapped(am));
  sm_release(priv);
  sm_release(shared);
  sm_release(managed);
}

Test(device, bad_buffer_requests_return_nil) {
  cr_assert_null(new_buffer(0, OPT_SHARED));
  cr_assert_null(new_buffer(16, OPT_MEMORYLESS));
  cr_assert_null(new_buffer(16, 0x40));   /* storage mode 4 */
  cr_assert_null(new_buffer(16, 0x2));    /* cache mode 2 */
  cr_assert_null(new_buffer(16, 0x1000)); /* unknown bits */
  cr_assert_null(new_buffer(sm_u(dev, "maxBufferLength") + 1, OPT_SHARED));
  cr_assert_null(SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
                      "newBufferWithBytes:length:options:", NULL, 16, 0));
}

Test(device, buffer_with_bytes_copies) {
  float src[4] = {1, 2, 3, 4};
  id b = SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
              "newBufferWithBytes:length:options:", src, sizeof src, OPT_MANAGED);
  src[0] = 9;
  float *p = SEND0(void *, b, "contents");
  cr_assert_eq(p[0], 1);
  cr_assert_eq(p[3], 4);
  cr_assert_eq(sm_u(b, "storageMode"), 1);
  SEND(void, (id, SEL, NSRange), b, "didModifyRange:", ((NSRange){4, 12}));
  sm_release(b);
}

Test(device, did_modify_range_on_shared_aborts, .signal = SIGABRT) {
  id b = keep = new_buffer(16, OPT_SHARED);
  SEND(void, (id, SEL, NSRange), b, "didModifyRange:", ((NSRange){0, 4}));
}

Test(device, did_modify_range_beyond_length_aborts, .signal = SIGABRT) {
  id b = keep = new_buffer(16, OPT_MANAGED);
  SEND(void, (id, SEL, NSRange), b, "didModifyRange:", ((NSRange){8, 9}));
}

Test(device, nocopy_wraps_memory_and_runs_deallocator_once) {
  void *mem = aligned_alloc(PAGE, 2 * PAGE);
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_DEALLOC_BLOCK(&ctx);
  id b = new_nocopy(mem, 2 * PAGE, OPT_SHARED, &blk);
  cr_assert_not_null(b);
  cr_assert_eq(SEND0(void *, b, "contents"), mem);
  cr_assert_eq(sm_u(b, "length"), 2 * PAGE);
  cr_assert_eq(atomic_load(&ctx.copies), 1, "the block is copied");
  cr_assert_eq(atomic_load(&ctx.calls), 0);
  sm_retain(b);
  sm_release(b);
  cr_assert_eq(atomic_load(&ctx.calls), 0);
  sm_release(b);
  cr_assert_eq(atomic_load(&ctx.calls), 1);
  cr_assert_eq(ctx.ptr, mem);
  cr_assert_eq(ctx.len, 2 * PAGE);
  cr_assert_eq(atomic_load(&ctx.disposes), 1, "the copy is released once");
  free(mem);
}

Test(device, nocopy_refuses_unaligned_memory_without_calling_back) {
  unsigned char *mem = aligned_alloc(PAGE, 3 * PAGE);
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_DEALLOC_BLOCK(&ctx);
  cr_assert_null(new_nocopy(mem + 64, PAGE, OPT_SHARED, &blk));
  cr_assert_null(new_nocopy(mem, PAGE + 1, OPT_SHARED, &blk));
  cr_assert_null(new_nocopy(mem + 8, 4096, OPT_SHARED, &blk));
  cr_assert_null(new_nocopy(mem, 0, OPT_SHARED, &blk));
  cr_assert_null(new_nocopy(mem, PAGE, OPT_PRIVATE, &blk));
  cr_assert_null(new_nocopy(NULL, PAGE, OPT_SHARED, &blk));
  cr_assert_eq(atomic_load(&ctx.calls), 0);
  cr_assert_eq(atomic_load(&ctx.copies), atomic_load(&ctx.disposes));
  id b = new_nocopy(mem, PAGE, OPT_SHARED, NULL); /* no deallocator: allowed */
  cr_assert_not_null(b);
  sm_release(b);
  free(mem);
}

/* As ggml allocates: posix_memalign to the page size the process sees, the
 * length rounded up to it, all tensors in the one buffer. Metal checks the
 * Mac's own page size, so a program that asks sysconf is right everywhere. */
Test(device, nocopy_takes_the_page_size_the_process_sees) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t want = 3 * page + 100, len = (want + page - 1) / page * page;
  void *mem = NULL;
  cr_assert_eq(posix_memalign(&mem, page, len), 0);
  id b = new_nocopy(mem, len, OPT_SHARED, NULL);
  cr_assert_not_null(b, "page %zu refused (see stderr)", page);
  cr_assert_eq(SEND0(void *, b, "contents"), mem);
  cr_assert_eq(sm_u(b, "length"), len);
  sm_release(b);
  b = new_nocopy((char *)mem + page, page, OPT_SHARED, NULL); /* one page of it */
  cr_assert_not_null(b);
  sm_release(b);
  cr_assert_null(new_nocopy((char *)mem + page / 2, page, OPT_SHARED, NULL));
  cr_assert_null(new_nocopy(mem, page / 2, OPT_SHARED, NULL));
  free(mem);
}

Test(device, shared_event_holds_its_value) {
  id e = SEND0(id, dev, "newSharedEvent");
  cr_assert_eq(SEND0(uint64_t, e, "signaledValue"), 0);
  SEND(void, (id, SEL, uint64_t), e, "setSignaledValue:", 42);
  cr_assert_eq(SEND0(uint64_t, e, "signaledValue"), 42);
  sm_release(e);
}

Test(device, several_devices_with_the_default_anywhere) {
  setenv("SOFTMETAL_DEVICE_COUNT", "3", 1);
  setenv("SOFTMETAL_DEFAULT_DEVICE", "2", 1);
  id all = MTLCopyAllDevices();
  cr_assert_eq(sm_u(all, "count"), 3);
  id d[3];
  for (NSUInteger i = 0; i < 3; i++)
    d[i] = SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", i);
  cr_assert_eq(d[0], dev, "the device already alive is index 0");
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++) {
      cr_assert_neq(d[i], d[j]);
      cr_assert_neq(SEND0(uint64_t, d[i], "registryID"), SEND0(uint64_t, d[j], "registryID"));
      cr_assert_str_neq(sm_utf8(SEND0(id, d[i], "name")), sm_utf8(SEND0(id, d[j], "name")));
    }
  id def = MTLCreateSystemDefaultDevice();
  cr_assert_eq(def, d[2], "SOFTMETAL_DEFAULT_DEVICE = 2 is the system default");
  id b = new_buffer(16, OPT_SHARED);
  cr_assert_eq(SEND0(id, b, "device"), dev);
  id b2 =
      SEND(id, (id, SEL, NSUInteger, NSUInteger), def, "newBufferWithLength:options:", 16ul, 0ul);
  cr_assert_eq(SEND0(id, b2, "device"), def, "buffers belong to the device that made them");
  sm_release(b);
  sm_release(b2);
  sm_release(def);
  sm_release(all);
  unsetenv("SOFTMETAL_DEVICE_COUNT");
  unsetenv("SOFTMETAL_DEFAULT_DEVICE");
}

Test(device, a_default_device_beyond_the_count_aborts, .signal = SIGABRT) {
  setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
  setenv("SOFTMETAL_DEFAULT_DEVICE", "2", 1);
  keep = MTLCreateSystemDefaultDevice();
}
