/* SPDX-License-Identifier: MIT */
/* Fiber context switches without system calls (x86-64 and aarch64): the
 * callee-saved registers, the stack pointer and the floating-point control
 * state (MXCSR and the x87 control word; FPCR), nothing else. glibc's
 * swapcontext also saves and restores the signal mask, a sigprocmask call
 * per switch; fibers never change the mask, so there is nothing to save.
 * Elsewhere sm_exec.c uses swapcontext. */
#include "sm_fiber.h"

#include <stdint.h>

#if SM_FIBER_ASM

#if defined(__x86_64__)
/* The frame sm__fiber_switch leaves on a stack it leaves, from its sp up:
 * x87 control word (at 0), MXCSR (at 8), r15, r14, r13, r12, rbx, rbp, the
 * return address. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl sm__fiber_switch\n"
        ".hidden sm__fiber_switch\n"
        ".type sm__fiber_switch, @function\n"
        "sm__fiber_switch:\n" /* rdi: where to save sp, rsi: sp to load */
        "  .cfi_startproc\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $16, %rsp\n"
        "  fnstcw (%rsp)\n"
        "  stmxcsr 8(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  fldcw (%rsp)\n"
        "  ldmxcsr 8(%rsp)\n"
        "  addq $16, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size sm__fiber_switch, .-sm__fiber_switch\n"
        /* A new fiber's first switch returns here: rbx holds the entry
         * function; the stack is 16-byte aligned, rbp 0 (frame walks end). */
        ".p2align 4\n"
        ".type sm_fiber_start, @function\n"
        "sm_fiber_start:\n"
        "  .cfi_startproc\n"
        "  .cfi_undefined rip\n"
        "  callq *%rbx\n"
        "  ud2\n"
        "  .cfi_endproc\n"
        ".size sm_fiber_start, .-sm_fiber_start\n");

void *sm__fiber_stack_init(unsigned char *stack, size_t size, void (*entry)(void)) {
  extern const char sm_fiber_start[] __asm__("sm_fiber_start")
      __attribute__((visibility("hidden")));
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)(top - 72);
  uint16_t cw;
  uint32_t mxcsr;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  sp[0] = cw;
  sp[1] = mxcsr;
  sp[2] = sp[3] = sp[4] = sp[5] = 0;           /* r15, r14, r13, r12 */
  sp[6] = (uint64_t)(uintptr_t)entry;          /* rbx */
  sp[7] = 0;                                   /* rbp */
  sp[8] = (uint64_t)(uintptr_t)sm_fiber_start; /* at top - 8 */
  return sp;
}

#elif defined(__aarch64__)
/* The frame sm__fiber_switch leaves on a stack it leaves (176 bytes), from
 * its sp up: x19..x28, x29, x30, d8..d15, FPCR. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl sm__fiber_switch\n"
        ".hidden sm__fiber_switch\n"
        ".type sm__fiber_switch, %function\n"
        "sm__fiber_switch:\n" /* x0: where to save sp, x1: sp to load */
        "  .cfi_startproc\n"
        "  sub sp, sp, #176\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mrs x9, fpcr\n"
        "  str x9, [sp, #160]\n"
        "  mov x9, sp\n"
        "  str x9, [x0]\n"
        "  mov sp, x1\n"
        "  ldr x9, [sp, #160]\n"
        "  msr fpcr, x9\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #176\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size sm__fiber_switch, .-sm__fiber_switch\n"
        /* A new fiber's first switch returns here: x19 holds the entry
         * function; x29 and x30 are 0 (frame walks end). */
        ".p2align 4\n"
        ".type sm_fiber_start, %function\n"
        "sm_fiber_start:\n"
        "  .cfi_startproc\n"
        "  .cfi_undefined x30\n"
        "  blr x19\n"
        "  brk #1\n"
        "  .cfi_endproc\n"
        ".size sm_fiber_start, .-sm_fiber_start\n");

void *sm__fiber_stack_init(unsigned char *stack, size_t size, void (*entry)(void)) {
  extern const char sm_fiber_start[] __asm__("sm_fiber_start")
      __attribute__((visibility("hidden")));
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)(top - 176);
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  for (int i = 0; i < 22; i++) sp[i] = 0;
  sp[0] = (uint64_t)(uintptr_t)entry;           /* x19 */
  sp[11] = (uint64_t)(uintptr_t)sm_fiber_start; /* x30 */
  sp[20] = fpcr;
  return sp;
}
#endif

#endif /* SM_FIBER_ASM */
