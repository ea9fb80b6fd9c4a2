# Squall's CMake package, installed by crates/capi/install.sh as
# PREFIX/lib/cmake/Squall/SquallConfig.cmake beside the pkg-config files.
#
#   find_package(Squall REQUIRED)                      # or: find_package(Squall REQUIRED COMPONENTS pthread)
#   target_link_libraries(app PRIVATE Squall::squall)  # the C API (squall.h, squall.hpp)
#   target_link_libraries(app PRIVATE Squall::pthread) # an unchanged pthreads program
#
# One imported target per pkg-config file install.sh installed (SquallTargets.cmake, made from
# the .pc files by pc-to-cmake.awk): `squall.pc` -> Squall::squall, `squall-X.pc` -> Squall::X
# (Squall::pthread; a later layer's `squall-openmp.pc` gives Squall::openmp the same way). Each
# target carries exactly that file's Cflags and Libs: include directory, compile options
# (`-include squall/pthread.h`, `-fno-inline-atomics`, `-pthread`), the linker script
# fragments, `-Wl,--wrap=main`, the rpath and -lsquall. Components are the target names after
# `Squall::`; Squall_<component>_FOUND says which exist.
# Point CMake here with -DCMAKE_PREFIX_PATH=PREFIX (or -DSquall_DIR=PREFIX/lib/cmake/Squall).

if(CMAKE_VERSION VERSION_LESS 3.13)
  set(Squall_FOUND FALSE)
  set(Squall_NOT_FOUND_MESSAGE "Squall's targets need CMake 3.13 or newer (INTERFACE_LINK_OPTIONS)")
  return()
endif()

# The install prefix: this file is PREFIX/lib/cmake/Squall/SquallConfig.cmake.
get_filename_component(_SQUALL_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
include("${CMAKE_CURRENT_LIST_DIR}/SquallTargets.cmake")

set(Squall_FOUND TRUE)
foreach(_squall_comp IN LISTS Squall_FIND_COMPONENTS)
  if(TARGET Squall::${_squall_comp})
    set(Squall_${_squall_comp}_FOUND TRUE)
  else()
    set(Squall_${_squall_comp}_FOUND FALSE)
    if(Squall_FIND_REQUIRED_${_squall_comp})
      set(Squall_FOUND FALSE)
      set(Squall_NOT_FOUND_MESSAGE
        "Squall at ${_SQUALL_PREFIX} has no component ${_squall_comp} (no squall-${_squall_comp}.pc was installed)")
    endif()
  endif()
endforeach()
unset(_squall_comp)
set(Squall_INCLUDE_DIRS "${_SQUALL_PREFIX}/include")
