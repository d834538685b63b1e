/* SPDX-License-Identifier: MIT */
/* A program built only with `pkg-config --cflags --libs softmetal` and
 * clang: softmetal's installed <dispatch/dispatch.h> and
 * <TargetConditionals.h>, blocks, and libsoftmetal. Exits 0 on success. */
#include <TargetConditionals.h>
#include <dispatch/dispatch.h>
#include <stdio.h>

#if !TARGET_OS_OSX
#error "softmetal's TargetConditionals.h: TARGET_OS_OSX should be 1"
#endif

int main(void) {
    dispatch_queue_t q = dispatch_queue_create("consumer", DISPATCH_QUEUE_CONCURRENT);
    dispatch_group_t g = dispatch_group_create();
    __block long sum = 0;
    dispatch_group_async(g, q, ^{
      dispatch_apply(100, q, ^(size_t i) {
        __atomic_fetch_add(&sum, (long)i, __ATOMIC_RELAXED);
      });
    });
    long waited = (long)dispatch_group_wait(g, DISPATCH_TIME_FOREVER);
    dispatch_release(g);
    dispatch_release(q);
    printf("softmetal consumer: sum %ld\n", sum);
    return waited != 0 || sum != 4950;
}
