/* SPDX-License-Identifier: MIT */
/* softmetal kernel faults: a fault raised while a thread runs kernel code
 * (integer division by zero, a wild or out-of-bounds access, a trap) fails
 * the dispatch instead of killing the process.
 *
 * The handlers act only when the faulting thread is inside kernel code
 * (sm__t_fault set by sm_exec.c); any other fault goes to the handler that
 * was installed before ours (a sanitizer's, a test framework's) or to the
 * default action. On a kernel fault the handler records what happened and
 * returns into sm_fault's landing function on the faulting stack instead of
 * the faulting instruction; the landing function, ordinary code outside any
 * signal handler, calls the dispatch's land() (a longjmp to the threadgroup
 * loop, or a switch back to the fiber scheduler), so that ASan, TSan and
 * valgrind see only ordinary jumps and fiber switches. */
#define _GNU_SOURCE /* REG_RIP, MAP_ANONYMOUS */
#include "sm_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_MAKE_MEM_UNDEFINED(a, n) ((void)(a), (void)(n))
#define VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#define VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#endif

__thread sm_fault *sm__t_fault __attribute__((tls_model("initial-exec")));

#if defined(__x86_64__) || defined(__aarch64__)
#define SM_FAULTS 1
#else
#define SM_FAULTS 0 /* no landing: faults keep their default action */
#endif

static const int SIGNALS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
enum { NSIG_OURS = sizeof SIGNALS / sizeof SIGNALS[0] };
static struct sigaction g_prev[NSIG_OURS];

static _Noreturn void landing(void) {
  sm_fault *f = sm__t_fault;
  sm__t_fault = NULL; /* a fault in land() itself is not a kernel fault */
  f->land(f);
  abort(); /* land() does not return */
}

static void chain(int slot, int sig, siginfo_t *si, void *uc) {
  struct sigaction *p = &g_prev[slot];
  if (p->sa_flags & SA_SIGINFO) {
    if (p->sa_sigaction) {
      p->sa_sigaction(sig, si, uc);
      return;
    }
  } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
    p->sa_handler(sig);
    return;
  }
  /* Default action: a synchronous fault happens again on return; a signal
   * sent by kill() is raised again, delivered once this handler returns. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (si->si_code <= 0) raise(sig);
}

#if SM_FAULTS && defined(__x86_64__)
/* The length of the div or idiv (F6 or F7 /6 /7, any prefixes) at p and
 * its operand size in bytes, or 0 when p holds another instruction. */
static int div_length(const unsigned char *p, int *size) {
  int n = 0, opsize = 4;
  for (;; n++) {
    unsigned char b = p[n];
    if (n > 4) return 0;
    if (b == 0x66)
      opsize = 2;
    else if (!(b == 0x67 || b == 0x2e || b == 0x36 || b == 0x3e || b == 0x26 || b == 0x64 ||
               b == 0x65 || b == 0xf2 || b == 0xf3))
      break;
  }
  bool rex_w = false;
  if ((p[n] & 0xf0) == 0x40) rex_w = (p[n++] & 8) != 0;
  unsigned char op = p[n++];
  if (op != 0xf6 && op != 0xf7) return 0;
  unsigned char m = p[n++];
  int mod = m >> 6, reg = (m >> 3) & 7, rm = m & 7;
  if (reg != 6 && reg != 7) return 0;
  if (mod != 3) {
    if (rm == 4 && mod == 0 && (p[n] & 7) == 5) n += 4; /* SIB without base: disp32 */
    if (rm == 4) n++;                                   /* the SIB byte */
    if (mod == 0 && rm == 5) n += 4;                    /* rip-relative */
    n += mod == 1 ? 1 : mod == 2 ? 4 : 0;
  }
  *size = op == 0xf6 ? 1 : rex_w ? 8 : opsize;
  return n;
}

/* Integer division by zero gives a value on a GPU (MSL: undefined) and the
 * kernel goes on: the quotient 0 and the remainder the dividend, as aarch64
 * computes them; likewise the most negative value by -1. Returns false when
 * the instruction is not a division. */
static bool divide_on(ucontext_t *uc) {
  greg_t *g = uc->uc_mcontext.gregs;
  int size = 0, len = div_length((const unsigned char *)g[REG_RIP], &size);
  if (!len) return false;
  uint64_t a = (uint64_t)g[REG_RAX], d = (uint64_t)g[REG_RDX];
  switch (size) {
  case 1: /* AX / r8: AL quotient, AH remainder */
    g[REG_RAX] = (greg_t)((a & ~(uint64_t)0xffff) | ((a & 0xff) << 8));
    break;
  case 2: /* DX:AX: AX quotient, DX remainder */
    g[REG_RDX] = (greg_t)((d & ~(uint64_t)0xffff) | (a & 0xffff));
    g[REG_RAX] = (greg_t)(a & ~(uint64_t)0xffff);
    break;
  case 4: /* EDX:EAX; 32-bit results clear the upper halves */
    g[REG_RDX] = (greg_t)(a & 0xffffffffu);
    g[REG_RAX] = 0;
    break;
  default:
    g[REG_RDX] = (greg_t)a;
    g[REG_RAX] = 0;
    break;
  }
  g[REG_RIP] += len;
  return true;
}
#endif

static void on_signal(int sig, siginfo_t *si, void *uc_) {
  int saved = errno;
  int slot = 0;
  while (slot < NSIG_OURS - 1 && SIGNALS[slot] != sig) slot++;
  sm_fault *f = sm__t_fault;
  if (!SM_FAULTS || !f || f->fired) {
    chain(slot, sig, si, uc_);
    errno = saved;
    return;
  }
#if SM_FAULTS && defined(__x86_64__)
  /* (aarch64: clang's trapping check stays a fault in both modes for now;
   * its trap block does not return to the division. Under valgrind too:
   * the registers set here did not always reach the code after it.) */
  if (!f->divide_faults && !RUNNING_ON_VALGRIND && sig == SIGFPE &&
      (si->si_code == FPE_INTDIV || si->si_code == FPE_INTOVF) && divide_on(uc_)) {
    errno = saved;
    return;
  }
#endif
  f->fired = 1;
  f->sig = sig;
  f->code = si->si_code;
  f->addr = si->si_addr;
  f->write = -1;
  f->trap_kind = -1;
#if SM_FAULTS
  ucontext_t *uc = uc_;
  uintptr_t sp;
#if defined(__x86_64__)
  sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
  f->pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
  if (sig == SIGSEGV) f->write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  /* ud1l kind(%eax), %eax: 67 0f b9 40 kind (clang's -fsanitize-trap) */
  const unsigned char *ins = f->pc;
  if (sig == SIGILL && ins[0] == 0x67 && ins[1] == 0x0f && ins[2] == 0xb9 && ins[3] == 0x40)
    f->trap_kind = ins[4];
#else
  sp = (uintptr_t)uc->uc_mcontext.sp;
  f->pc = (void *)uc->uc_mcontext.pc;
  /* brk #0x55kk: clang's -fsanitize-trap of check kind kk */
  uint32_t ins = 0;
  if (sig == SIGTRAP || sig == SIGILL) memcpy(&ins, f->pc, sizeof ins);
  if ((ins & 0xFFE0001Fu) == 0xD4200000u && ((ins >> 5) & 0xFF00u) == 0x5500u)
    f->trap_kind = (int)((ins >> 5) & 0xFFu);
#endif
  /* The landing runs below the faulting frame, or at safe_sp when the fault
   * is the stack itself running out (the fault address near sp). */
  uintptr_t a = (uintptr_t)si->si_addr;
  bool overflow = (sig == SIGSEGV || sig == SIGBUS) && a < sp + 256 && a + 65536 > sp;
  uintptr_t land_sp = overflow && f->safe_sp ? f->safe_sp : sp - 512;
  if (overflow && !f->safe_sp) {
    chain(slot, sig, si, uc_);
    errno = saved;
    return;
  }
  f->stack_overflow = overflow;
  land_sp &= ~(uintptr_t)15;
  /* memcheck marks the stack below sp inaccessible and does not see this
   * jump as stack growth: the landing's frames are new stack. */
  uintptr_t vg_lo = land_sp - 16384, vg_hi = overflow ? land_sp : sp;
  VALGRIND_MAKE_MEM_UNDEFINED(vg_lo, vg_hi - vg_lo);
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(land_sp - 8); /* as after a call */
  uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)landing;
#else
  uc->uc_mcontext.sp = land_sp;
  uc->uc_mcontext.pc = (uintptr_t)landing;
#endif
#endif
  errno = saved;
}

static void install(void) {
  for (int i = 0; i < NSIG_OURS; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGNALS[i], &sa, &g_prev[i]) != 0) sm__fatal("softmetal: sigaction failed");
  }
}

void sm__fault_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install);
}

/* For a thread made to run kernels: the fault signals unblocked, and an
 * alternate signal stack while it runs them, unless it has one (sanitizer
 * runtimes give their threads one). */
enum { ALT_SIZE = 64 * 1024 };
void sm__altstack_push(sm_altstack *a) {
  a->mem = NULL;
  /* A thread inherits its maker's mask: a program that blocks these would
   * otherwise have kernel faults kill it. */
  sigset_t ours;
  sigemptyset(&ours);
  for (int i = 0; i < NSIG_OURS; i++) sigaddset(&ours, SIGNALS[i]);
  pthread_sigmask(SIG_UNBLOCK, &ours, NULL);
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
  void *m = mmap(NULL, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  stack_t ss = {.ss_sp = m, .ss_size = ALT_SIZE, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    munmap(m, ALT_SIZE);
    return;
  }
  a->mem = m;
}

void sm__altstack_pop(sm_altstack *a) {
  if (!a->mem) return;
  stack_t ss = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
  sigaltstack(&ss, NULL);
  munmap(a->mem, ALT_SIZE);
  a->mem = NULL;
}

/* A thread that waits for a command buffer may run it (sm_metal.c), where
 * its kernels' faults are caught as on a queue thread: the fault signals
 * are not blocked, the stack has room, and it has a signal stack, made here
 * once and kept until the thread ends. */
enum { WAITER_STACK_ROOM = 1024 * 1024 };
static pthread_key_t g_alt_key;
static _Thread_local uintptr_t t_stack_lo; /* 0: not yet asked */
static _Thread_local void *t_alt;          /* the signal stack made here */

static void alt_free(void *mem) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == mem) {
    stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
  }
  munmap(mem, ALT_SIZE);
}
static void alt_key_make(void) {
  if (pthread_key_create(&g_alt_key, alt_free) != 0)
    sm__fatal("softmetal: pthread_key_create failed");
}

/* Kernels' code defines thread-locals: a thread that ran them keeps their
 * dynamic TLS after the code is unloaded, and LeakSanitizer's tracer (libasan
 * up to GCC 13 / LLVM 16) can crash walking such a thread still alive at
 * exit ("Tracer caught signal 11"). Where LeakSanitizer is in the process,
 * only softmetal's own threads, joined before exit, run kernels. */
static bool g_lsan;
static void lsan_look(void) { g_lsan = dlsym(RTLD_DEFAULT, "__lsan_do_leak_check") != NULL; }

bool sm__fault_thread_ready(void) {
  static pthread_once_t lsan_once = PTHREAD_ONCE_INIT;
  pthread_once(&lsan_once, lsan_look);
  if (g_lsan) return false;
  sigset_t mask;
  if (pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0) return false;
  for (int i = 0; i < NSIG_OURS; i++)
    if (sigismember(&mask, SIGNALS[i])) return false;
  if (!t_stack_lo) {
    pthread_attr_t a;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return false;
    bool ok = pthread_attr_getstack(&a, &lo, &size) == 0;
    pthread_attr_destroy(&a);
    if (!ok) return false;
    t_stack_lo = (uintptr_t)lo + 1;
  }
  char here;
  if ((uintptr_t)&here < t_stack_lo + WAITER_STACK_ROOM) return false;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0) return false;
  if (!(cur.ss_flags & SS_DISABLE)) return true; /* ours or the program's */
  if (!t_alt) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, alt_key_make);
    void *m = mmap(NULL, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    if (pthread_setspecific(g_alt_key, m) != 0) {
      munmap(m, ALT_SIZE);
      return false;
    }
    t_alt = m;
  }
  stack_t ss = {.ss_sp = t_alt, .ss_size = ALT_SIZE, .ss_flags = 0};
  return sigaltstack(&ss, NULL) == 0;
}

const char *sm__fault_rule(const sm_fault *f, char *buf, size_t len) {
  switch (f->sig) {
  case SIGFPE:
    if (f->code == FPE_INTDIV || f->code == FPE_INTOVF)
      return "integer division or remainder by zero (or of the most negative value by -1): "
             "undefined in MSL (SIGFPE)";
    snprintf(buf, len, "arithmetic fault (SIGFPE, code %d)", f->code);
    return buf;
  case SIGILL:
  case SIGTRAP:
    if (f->trap_kind == 3) /* clang's DivremOverflow check */
      return "integer division or remainder by zero: undefined in MSL";
    snprintf(buf, len, "the kernel executed a trap (%s at pc %p)",
             f->sig == SIGILL ? "SIGILL" : "SIGTRAP", f->pc);
    return buf;
  default:
    if (f->stack_overflow) {
      snprintf(buf, len,
               "stack overflow (%s at address %p): the thread used more stack "
               "than softmetal gives it",
               f->sig == SIGBUS ? "SIGBUS" : "SIGSEGV", f->addr);
      return buf;
    }
    snprintf(buf, len, "invalid memory %s at address %p (%s)",
             f->write == 1   ? "write"
             : f->write == 0 ? "read"
                             : "access",
             f->addr, f->sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
    return buf;
  }
}

/* ------------------------------------------------------------- guarded buffers */
enum { GUARD = 64 * 1024, SYS_PAGE_MIN = 4096, VEC = 64 /* widest vector access */ };

bool sm__shader_validation(void) {
  const char *v = getenv("MTL_SHADER_VALIDATION");
  return v && strcmp(v, "1") == 0;
}

static size_t guarded_geometry(size_t length, size_t *data, size_t *pages) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (page < SYS_PAGE_MIN) page = SYS_PAGE_MIN;
  *data = (length + 15) / 16 * 16;
  *pages = (*data + page - 1) / page * page;
  return GUARD + *pages + GUARD;
}

void *sm__guarded_alloc(size_t length) {
  size_t data, pages;
  if (length > ((size_t)1 << 40)) return NULL;
  size_t total = guarded_geometry(length, &data, &pages);
  unsigned char *m =
      mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (mprotect(m + GUARD, pages, PROT_READ | PROT_WRITE) != 0) {
    munmap(m, total);
    return NULL;
  }
  /* Under memcheck the guards fault as they do natively, and softmetal
   * reports the access: memcheck need not (nor for a vector access that
   * starts in the buffer's last bytes and runs into the guard). */
  VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(m, GUARD + VEC);
  VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(m + GUARD + pages - VEC, GUARD + VEC);
  return m + GUARD + pages - data; /* the end meets the guard after it */
}

void sm__guarded_free(void *p, size_t length) {
  if (!p) return;
  size_t data, pages;
  size_t total = guarded_geometry(length, &data, &pages);
  unsigned char *m = (unsigned char *)p + data - pages - GUARD;
  VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(m, GUARD + VEC);
  VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(m + GUARD + pages - VEC, GUARD + VEC);
  munmap(m, total);
}

size_t sm__guard_bytes(void) { return GUARD; }
