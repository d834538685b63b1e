/* SPDX-License-Identifier: MIT */
/* objc_msgSend and objc_msgSend_stret for GNU libobjc on x86-64 Linux, so
 * that the bridge's Apple dispatch path runs in tests: look the IMP up with
 * objc_msg_lookup, restore every argument register, then tail-jump to it.
 *
 * Frame (200 bytes; rsp is 16-aligned after the sub, as entry rsp = 8 mod 16):
 *   0..48   rdi rsi rdx rcx r8 r9 rax    64..176  xmm0..xmm7 */
        .text

        .macro COUNT counter
        movq    \counter@GOTPCREL(%rip), %r11
        lock incq (%r11)
        .endm

        .macro SAVE_ARGS
        subq    $200, %rsp
        movq    %rdi, 0(%rsp)
        movq    %rsi, 8(%rsp)
        movq    %rdx, 16(%rsp)
        movq    %rcx, 24(%rsp)
        movq    %r8, 32(%rsp)
        movq    %r9, 40(%rsp)
        movq    %rax, 48(%rsp)
        movaps  %xmm0, 64(%rsp)
        movaps  %xmm1, 80(%rsp)
        movaps  %xmm2, 96(%rsp)
        movaps  %xmm3, 112(%rsp)
        movaps  %xmm4, 128(%rsp)
        movaps  %xmm5, 144(%rsp)
        movaps  %xmm6, 160(%rsp)
        movaps  %xmm7, 176(%rsp)
        .endm

        .macro RESTORE_ARGS_AND_JUMP
        movq    %rax, %r11
        movq    0(%rsp), %rdi
        movq    8(%rsp), %rsi
        movq    16(%rsp), %rdx
        movq    24(%rsp), %rcx
        movq    32(%rsp), %r8
        movq    40(%rsp), %r9
        movq    48(%rsp), %rax
        movaps  64(%rsp), %xmm0
        movaps  80(%rsp), %xmm1
        movaps  96(%rsp), %xmm2
        movaps  112(%rsp), %xmm3
        movaps  128(%rsp), %xmm4
        movaps  144(%rsp), %xmm5
        movaps  160(%rsp), %xmm6
        movaps  176(%rsp), %xmm7
        addq    $200, %rsp
        jmp     *%r11
        .endm

/* id objc_msgSend(id self, SEL op, ...): self in rdi, op in rsi. */
        .globl  objc_msgSend
        .type   objc_msgSend, @function
objc_msgSend:
        .cfi_startproc
        COUNT   cmtest_msgsend_calls
        SAVE_ARGS
        .cfi_adjust_cfa_offset 200
        call    objc_msg_lookup@PLT
        RESTORE_ARGS_AND_JUMP
        .cfi_endproc
        .size   objc_msgSend, .-objc_msgSend

/* objc_msgSend_stret(result *, id self, SEL op, ...): the hidden result
 * pointer is in rdi, so self is in rsi and op in rdx. */
        .globl  objc_msgSend_stret
        .type   objc_msgSend_stret, @function
objc_msgSend_stret:
        .cfi_startproc
        COUNT   cmtest_stret_calls
        SAVE_ARGS
        .cfi_adjust_cfa_offset 200
        movq    %rsi, %rdi
        movq    %rdx, %rsi
        call    objc_msg_lookup@PLT
        RESTORE_ARGS_AND_JUMP
        .cfi_endproc
        .size   objc_msgSend_stret, .-objc_msgSend_stret

        .section .note.GNU-stack,"",@progbits
