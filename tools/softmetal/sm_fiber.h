/* SPDX-License-Identifier: MIT */
/* Fiber context switches of softmetal's own (sm_fiber.c), where
 * SM_FIBER_ASM is 1; sm_exec.c falls back to swapcontext elsewhere. Internal
 * to libsoftmetal. */
#ifndef SM_FIBER_H
#define SM_FIBER_H

#include <stddef.h>

#if defined(__x86_64__) || defined(__aarch64__)
#define SM_FIBER_ASM 1
#else
#define SM_FIBER_ASM 0
#endif

#if SM_FIBER_ASM
/* Saves the callee-saved registers and the floating-point control state on
 * the current stack, stores the stack pointer in *save, then continues on
 * the stack `load` (a pointer an earlier sm__fiber_switch stored, or one
 * sm__fiber_stack_init made). Returns when something switches back. */
void sm__fiber_switch(void **save, void *load);
/* Makes a stack [stack, stack + size) whose first switch calls entry (which
 * must never return) with the caller's floating-point control state.
 * Returns the pointer to switch to. */
void *sm__fiber_stack_init(unsigned char *stack, size_t size, void (*entry)(void));
#endif

#endif
