# emmy_add_kernels(TARGET SOURCES a.emmy [b.emmy ...] [ARCH sm_90] [OPTIONS option ...])
#
# Compiles each .emmy file with `emmy build` at build time into NAME.cu and NAME.h (in a folder of the
# build tree), adds the .cu files to TARGET and that folder to its include path, so that TARGET can
# `#include "NAME.h"` and call the generated host functions. A file is rebuilt when it, a module it
# imports or emmy itself changes. ARCH (sm_XY) sets TARGET's CUDA_ARCHITECTURES; OPTIONS go to
# `emmy build` as they are (`-D BM=128`, `--kernel softmax`). TARGET's project must enable CUDA.
#
# EMMY_EXECUTABLE names the emmy to run; find_package(Emmy) sets it to the installed one.
function(emmy_add_kernels target)
  cmake_parse_arguments(PARSE_ARGV 1 EMMY "" "ARCH" "SOURCES;OPTIONS")
  if(NOT TARGET ${target})
    message(FATAL_ERROR "emmy_add_kernels: no target named '${target}'")
  endif()
  if(NOT EMMY_SOURCES)
    message(FATAL_ERROR "emmy_add_kernels(${target}): no SOURCES")
  endif()
  if(EMMY_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "emmy_add_kernels(${target}): unexpected arguments ${EMMY_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT EMMY_EXECUTABLE)
    find_program(EMMY_EXECUTABLE emmy REQUIRED)
  endif()
  set(output_dir "${CMAKE_CURRENT_BINARY_DIR}/emmy/${target}")
  file(MAKE_DIRECTORY "${output_dir}")
  foreach(source IN LISTS EMMY_SOURCES)
    get_filename_component(source_path "${source}" ABSOLUTE)
    get_filename_component(name "${source}" NAME_WE)
    add_custom_command(
      OUTPUT "${output_dir}/${name}.cu" "${output_dir}/${name}.h"
      COMMAND "${EMMY_EXECUTABLE}" build "${source_path}" -o "${output_dir}" --depfile "${output_dir}/${name}.d"
              ${EMMY_OPTIONS}
      DEPENDS "${source_path}" "${EMMY_EXECUTABLE}"
      DEPFILE "${output_dir}/${name}.d"
      COMMENT "Emmy: ${source} -> ${name}.cu, ${name}.h"
      VERBATIM)
    target_sources(${target} PRIVATE "${output_dir}/${name}.cu" "${output_dir}/${name}.h")
  endforeach()
  target_include_directories(${target} PRIVATE "${output_dir}")
  if(EMMY_ARCH)
    if(NOT EMMY_ARCH MATCHES "^sm_([0-9]+)[af]?$")
      message(FATAL_ERROR "emmy_add_kernels(${target}): ARCH must be sm_XY, not '${EMMY_ARCH}'")
    endif()
    set_property(TARGET ${target} PROPERTY CUDA_ARCHITECTURES ${CMAKE_MATCH_1})
  endif()
endfunction()
