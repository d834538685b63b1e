# SPDX-License-Identifier: MIT
# cmetal_embed_library(<target> <file> <symbol>)
# Embeds a Metal library file (a .metallib on a Mac, softmetal's container
# from softmetal-metallib on Linux) into <target>, so that a static binary
# ships no separate file: the C code declares
#     extern const unsigned char <symbol>[];
#     extern const size_t <symbol>_size;
# and passes them to cm_library_load. <file> may be a build output; the
# embedding reruns when it changes.
set(_cmetal_embed_script ${CMAKE_CURRENT_LIST_DIR}/embed_binary.cmake)
function(cmetal_embed_library target file symbol)
  get_filename_component(path "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(out ${CMAKE_CURRENT_BINARY_DIR}/cmetal_embed_${symbol}.c)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DSYMBOL=${symbol} -DINPUT=${path}
            -P ${_cmetal_embed_script}
    DEPENDS ${path} ${_cmetal_embed_script}
    COMMENT "Embedding ${file} as ${symbol}")
  target_sources(${target} PRIVATE ${out})
endfunction()
