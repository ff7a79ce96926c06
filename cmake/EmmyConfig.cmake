# find_package(Emmy): the installed emmy and emmy_add_kernels (Emmy.cmake).
get_filename_component(_emmy_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
find_program(EMMY_EXECUTABLE emmy PATHS "${_emmy_prefix}/bin" NO_DEFAULT_PATH REQUIRED)
include("${CMAKE_CURRENT_LIST_DIR}/Emmy.cmake")
unset(_emmy_prefix)
