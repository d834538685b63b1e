/* SPDX-License-Identifier: MIT */
/* softmetal's <TargetConditionals.h>: the TARGET_* macros of Apple's
 * public header. softmetal is a Mac's Metal, so a program built against it
 * takes its macOS path: TARGET_OS_MAC and TARGET_OS_OSX are 1, every other
 * operating system 0; the CPU macros follow the compiler's target. */
#ifndef SOFTMETAL_TARGET_CONDITIONALS_H
#define SOFTMETAL_TARGET_CONDITIONALS_H

#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_MACCATALYST 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_VISION 0
#define TARGET_OS_BRIDGE 0
#define TARGET_OS_DRIVERKIT 0
#define TARGET_OS_SIMULATOR 0
#define TARGET_OS_EMBEDDED 0
#define TARGET_IPHONE_SIMULATOR 0
#define TARGET_OS_UNIX 0
#define TARGET_OS_WIN32 0

#if defined(__x86_64__)
#define TARGET_CPU_X86_64 1
#else
#define TARGET_CPU_X86_64 0
#endif
#if defined(__aarch64__)
#define TARGET_CPU_ARM64 1
#else
#define TARGET_CPU_ARM64 0
#endif
#define TARGET_CPU_X86 0
#define TARGET_CPU_ARM 0
#define TARGET_CPU_PPC 0
#define TARGET_CPU_PPC64 0

#if defined(__LP64__)
#define TARGET_RT_64_BIT 1
#else
#define TARGET_RT_64_BIT 0
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TARGET_RT_LITTLE_ENDIAN 0
#define TARGET_RT_BIG_ENDIAN 1
#else
#define TARGET_RT_LITTLE_ENDIAN 1
#define TARGET_RT_BIG_ENDIAN 0
#endif
#define TARGET_RT_MAC_MACHO 0

#endif
