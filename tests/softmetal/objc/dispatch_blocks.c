/* SPDX-License-Identifier: MIT */
/* softmetal's dispatch (GCD) functions from C with blocks, built by clang
 * -fblocks: queues, async, sync, apply, groups, semaphores, retain and
 * release, an autorelease pool around every block. Exits 0 when every check
 * holds. It includes softmetal's own <dispatch/dispatch.h>. */
#include <TargetConditionals.h>
#include <dispatch/dispatch.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <objc/message.h>
#include <objc/runtime.h>

#include "softmetal.h"

#if !TARGET_OS_OSX || TARGET_OS_IPHONE || TARGET_CPU_X86_64 + TARGET_CPU_ARM64 != 1
#error "<TargetConditionals.h>: softmetal is a Mac's Metal, on the compiler's CPU"
#endif

void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *token);

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static dispatch_time_t after_ms(int64_t ms) {
  return dispatch_time(DISPATCH_TIME_NOW, ms * (int64_t)NSEC_PER_MSEC);
}

/* An autoreleased NSString, as Foundation calls inside a block make them. */
static void *autoreleased_string(void) {
  id cls = (id)objc_getClass("NSString");
  SEL sel = sel_registerName("stringWithUTF8String:");
  void *(*imp)(id, SEL, const char *) = (void *(*)(id, SEL, const char *))objc_msg_lookup(cls, sel);
  return imp(cls, sel, "made in a block");
}

static void serial_queue_runs_in_order_one_at_a_time(void) {
  enum { N = 2000 };
  dispatch_queue_t q = dispatch_queue_create("org.cmetal.test.serial", DISPATCH_QUEUE_SERIAL);
  CHECK(strcmp(dispatch_queue_get_label(q), "org.cmetal.test.serial") == 0, "label");
  static int order[N];
  __block int n = 0;
  static atomic_int inside, most;
  for (int i = 0; i < N; i++)
    dispatch_async(q, ^{
      int now = atomic_fetch_add(&inside, 1) + 1;
      if (now > atomic_load(&most)) atomic_store(&most, now);
      order[n++] = i;
      atomic_fetch_sub(&inside, 1);
    });
  __block int seen = -1;
  dispatch_sync(q, ^{
    seen = n;
  }); /* after every block before it */
  CHECK(seen == N, "dispatch_sync ran after %d of %d blocks", seen, N);
  for (int i = 0; i < N; i++) CHECK(order[i] == i, "order[%d] = %d", i, order[i]);
  CHECK(atomic_load(&most) == 1, "%d blocks of a serial queue ran at once", atomic_load(&most));
  dispatch_release(q);
}

/* Block a waits for b: only a queue that runs them at once finishes. */
static void concurrent_queue_runs_blocks_at_once(void) {
  dispatch_queue_t q =
      dispatch_queue_create("org.cmetal.test.concurrent", DISPATCH_QUEUE_CONCURRENT);
  dispatch_group_t g = dispatch_group_create();
  dispatch_semaphore_t sem = dispatch_semaphore_create(0);
  __block intptr_t waited = -1;
  dispatch_group_async(g, q, ^{
    waited = dispatch_semaphore_wait(sem, after_ms(10000));
  });
  dispatch_group_async(g, q, ^{
    dispatch_semaphore_signal(sem);
  });
  CHECK(dispatch_group_wait(g, after_ms(20000)) == 0, "the group did not finish");
  CHECK(waited == 0, "block a timed out waiting for block b");
  dispatch_release(sem);
  dispatch_release(g);
  dispatch_release(q);
}

static void apply_runs_every_iteration_once(void) {
  enum { N = 10000 };
  static atomic_int hits[N];
  dispatch_apply(N, dispatch_get_global_queue(0, 0), ^(size_t i) {
    atomic_fetch_add(&hits[i], 1);
  });
  for (int i = 0; i < N; i++)
    CHECK(atomic_load(&hits[i]) == 1, "iteration %d ran %d times", i, atomic_load(&hits[i]));
  dispatch_queue_t serial = dispatch_queue_create(NULL, DISPATCH_QUEUE_SERIAL);
  __block size_t next = 0;
  __block int out_of_order = 0;
  dispatch_apply(100, serial, ^(size_t i) {
    out_of_order += i != next++;
  });
  CHECK(next == 100 && out_of_order == 0, "serial apply: %zu ran, %d out of order", next,
        out_of_order);
  dispatch_release(serial);
}

static void groups_wait_time_out_and_notify(void) {
  dispatch_group_t g = dispatch_group_create();
  dispatch_queue_t q = dispatch_queue_create("org.cmetal.test.notify", NULL);
  CHECK(dispatch_group_wait(g, DISPATCH_TIME_NOW) == 0, "an empty group waits");
  dispatch_group_enter(g);
  CHECK(dispatch_group_wait(g, after_ms(50)) != 0, "a group entered and not left returned 0");
  dispatch_semaphore_t done = dispatch_semaphore_create(0);
  __block int notified = 0;
  dispatch_group_notify(g, q, ^{
    notified = 1;
    dispatch_semaphore_signal(done);
  });
  CHECK(dispatch_semaphore_wait(done, after_ms(50)) != 0, "notified before the group emptied");
  dispatch_group_leave(g);
  CHECK(dispatch_semaphore_wait(done, after_ms(20000)) == 0, "never notified");
  CHECK(notified == 1, "notified");
  CHECK(dispatch_group_wait(g, DISPATCH_TIME_FOREVER) == 0, "the group is empty");
  dispatch_release(done);
  dispatch_release(q);
  dispatch_release(g);
}

static void semaphores_count(void) {
  dispatch_semaphore_t s = dispatch_semaphore_create(1);
  CHECK(dispatch_semaphore_create(-1) == NULL, "a negative value gives NULL");
  CHECK(dispatch_semaphore_wait(s, DISPATCH_TIME_NOW) == 0, "the first wait takes the 1");
  CHECK(dispatch_semaphore_wait(s, DISPATCH_TIME_NOW) != 0, "the second times out");
  CHECK(dispatch_semaphore_signal(s) == 0, "no thread was waiting");
  CHECK(dispatch_semaphore_wait(s, DISPATCH_TIME_FOREVER) == 0, "signalled");
  dispatch_release(s);
}

static int f_ran;
static void f_work(void *ctx) { f_ran = *(int *)ctx; }

/* Every block runs in an autorelease pool (sm__autorelease aborts without
 * one), drained when the block returns. */
static void blocks_run_in_autorelease_pools(void) {
  long before = softmetal_live_count("NSString");
  dispatch_group_t g = dispatch_group_create();
  dispatch_queue_t q = dispatch_queue_create("org.cmetal.test.pools", DISPATCH_QUEUE_CONCURRENT);
  __block atomic_int made = 0;
  for (int i = 0; i < 16; i++)
    dispatch_group_async(g, q, ^{
      if (autoreleased_string()) atomic_fetch_add(&made, 1);
    });
  dispatch_group_wait(g, DISPATCH_TIME_FOREVER);
  CHECK(atomic_load(&made) == 16, "%d strings made", atomic_load(&made));
  softmetal_quiesce();
  CHECK(softmetal_live_count("NSString") == before, "%ld strings left alive",
        softmetal_live_count("NSString") - before);
  static int ctx = 7;
  dispatch_async_f(q, &ctx, f_work);
  softmetal_quiesce(); /* waits for dispatched work too */
  CHECK(f_ran == 7, "dispatch_async_f's function ran with its context");
  dispatch_release(q);
  dispatch_release(g);
}

static void objects_are_reference_counted(void) {
  softmetal_quiesce();
  long queues = softmetal_live_count("OS_dispatch_queue");
  dispatch_queue_t q = dispatch_queue_create("org.cmetal.test.rc", NULL);
  dispatch_retain(q);
  dispatch_release(q);
  CHECK(softmetal_live_count("OS_dispatch_queue") == queues + 1, "the queue is alive");
  __block int ran = 0;
  dispatch_async(q, ^{
    ran = 1;
  });
  dispatch_release(q); /* the queued block keeps it until it has run */
  softmetal_quiesce();
  CHECK(ran == 1, "the block of a released queue ran");
  CHECK(softmetal_live_count("OS_dispatch_queue") == queues, "the queue is gone");
  dispatch_queue_t global = dispatch_get_global_queue(0, 0);
  CHECK(global == dispatch_get_global_queue(0, 0), "one global queue per priority");
  CHECK(dispatch_get_global_queue(12345, 0) == NULL, "an unknown priority gives NULL");
  dispatch_retain(global);
  dispatch_release(global);
  dispatch_release(global); /* global queues are never freed */
  CHECK(dispatch_get_global_queue(0, 0) == global, "still there");
}

/* The destructor constants of <dispatch/dispatch.h>: FREE hands the bytes to
 * free() when the object goes (ASan and valgrind see a leak otherwise). */
static void data_destructors(void) {
  char *bytes = malloc(64);
  memset(bytes, 1, 64);
  dispatch_data_t d = dispatch_data_create(bytes, 64, NULL, DISPATCH_DATA_DESTRUCTOR_FREE);
  CHECK(d != NULL, "dispatch_data_create");
  dispatch_retain(d);
  dispatch_release(d);
  dispatch_release(d);
  __block int ran = 0;
  char local[8] = {0};
  d = dispatch_data_create(local, sizeof local, NULL, ^{
    ran = 1;
  });
  dispatch_release(d);
  CHECK(ran == 1, "the destructor block ran when the data was released");
}

int main(void) {
  void *pool = objc_autoreleasePoolPush();
  serial_queue_runs_in_order_one_at_a_time();
  concurrent_queue_runs_blocks_at_once();
  apply_runs_every_iteration_once();
  groups_wait_time_out_and_notify();
  semaphores_count();
  blocks_run_in_autorelease_pools();
  objects_are_reference_counted();
  data_destructors();
  objc_autoreleasePoolPop(pool);
  softmetal_quiesce();
  long left = softmetal_live_count("OS_dispatch_group") +
              softmetal_live_count("OS_dispatch_queue") +
              softmetal_live_count("OS_dispatch_semaphore");
  CHECK(left == 0, "%ld dispatch objects alive at the end", left);
  if (failures)
    fprintf(stderr, "dispatch_blocks: %d check(s) failed\n", failures);
  else
    printf("dispatch_blocks: every check passed\n");
  /* Exit does not wait for a block that never finishes (ctest's timeout
   * catches a hang). */
  static dispatch_semaphore_t never;
  never = dispatch_semaphore_create(0);
  dispatch_async(dispatch_get_global_queue(0, 0), ^{
    dispatch_semaphore_wait(never, DISPATCH_TIME_FOREVER);
  });
  return failures ? 1 : 0;
}
