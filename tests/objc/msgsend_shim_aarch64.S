/* SPDX-License-Identifier: MIT */
/* objc_msgSend for GNU libobjc on aarch64 Linux, so that the bridge's Apple
 * dispatch path runs in tests with arm64's calling convention: look the IMP
 * up with objc_msg_lookup(x0, x1), restore every argument register, then
 * tail-jump to it. arm64 has no objc_msgSend_stret: a struct over 16 bytes
 * (MTLSize) comes back through memory at x8, which the caller sets, so x8
 * goes through untouched like x0-x7; an HFA (up to four floats or doubles)
 * comes back in v0-v3, small structs in x0/x1. Stack arguments are never
 * moved: sp is back at its entry value at the jump.
 *
 * Frame (224 bytes, sp stays 16-aligned):
 *   0  x29 x30   16..88  x0..x8   96..208  q0..q7 */
        .text
        .globl  objc_msgSend
        .type   objc_msgSend, %function
        .p2align 2
objc_msgSend:
        .cfi_startproc
        /* cmtest_msgsend_calls++, atomically (ARMv8.0: no LSE). x9, x10
         * and x16 are scratch across a call. */
        adrp    x16, :got:cmtest_msgsend_calls
        ldr     x16, [x16, #:got_lo12:cmtest_msgsend_calls]
1:      ldxr    x9, [x16]
        add     x9, x9, #1
        stxr    w10, x9, [x16]
        cbnz    w10, 1b

        stp     x29, x30, [sp, #-224]!
        .cfi_def_cfa_offset 224
        .cfi_offset x29, -224
        .cfi_offset x30, -216
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        stp     x2, x3, [sp, #32]
        stp     x4, x5, [sp, #48]
        stp     x6, x7, [sp, #64]
        str     x8, [sp, #80]
        stp     q0, q1, [sp, #96]
        stp     q2, q3, [sp, #128]
        stp     q4, q5, [sp, #160]
        stp     q6, q7, [sp, #192]

        bl      objc_msg_lookup          /* x0 = self, x1 = op */
        mov     x16, x0                  /* the IMP */

        ldp     x0, x1, [sp, #16]
        ldp     x2, x3, [sp, #32]
        ldp     x4, x5, [sp, #48]
        ldp     x6, x7, [sp, #64]
        ldr     x8, [sp, #80]
        ldp     q0, q1, [sp, #96]
        ldp     q2, q3, [sp, #128]
        ldp     q4, q5, [sp, #160]
        ldp     q6, q7, [sp, #192]
        ldp     x29, x30, [sp], #224
        .cfi_def_cfa_offset 0
        .cfi_restore x29
        .cfi_restore x30
        br      x16
        .cfi_endproc
        .size   objc_msgSend, .-objc_msgSend

        .section .note.GNU-stack,"",%progbits
