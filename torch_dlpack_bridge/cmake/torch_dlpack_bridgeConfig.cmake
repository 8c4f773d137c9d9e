# CMake package config of torch_dlpack_bridge's C/C++ consumer headers (dlpack.h, consumer.h, pybind11.h,
# nanobind.h). Find it with
#     find_package(torch_dlpack_bridge CONFIG REQUIRED)
# after pointing CMake here: -Dtorch_dlpack_bridge_DIR="$(python -m torch_dlpack_bridge --cmake-dir)"
# (or add that directory to CMAKE_PREFIX_PATH's search through torch_dlpack_bridge_DIR in your CMakeLists).
#
# Defines the INTERFACE target torch_dlpack_bridge::headers, which carries the include directory and C++17.
# It brings no torch headers and no torch libraries (that is the point). Python.h is not included either:
# link your module against Python (e.g. Python::Module, or use pybind11/nanobind's module helpers).
# Also sets torch_dlpack_bridge_INCLUDE_DIR.

get_filename_component(torch_dlpack_bridge_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)

if(NOT EXISTS "${torch_dlpack_bridge_INCLUDE_DIR}/torch_dlpack_bridge/consumer.h")
  set(torch_dlpack_bridge_FOUND FALSE)
  set(torch_dlpack_bridge_NOT_FOUND_MESSAGE
      "torch_dlpack_bridge/consumer.h not found under ${torch_dlpack_bridge_INCLUDE_DIR}")
  return()
endif()

if(NOT TARGET torch_dlpack_bridge::headers)
  add_library(torch_dlpack_bridge::headers INTERFACE IMPORTED)
  set_target_properties(torch_dlpack_bridge::headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${torch_dlpack_bridge_INCLUDE_DIR}"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()

if(NOT torch_dlpack_bridge_FIND_QUIETLY)
  message(STATUS "Found torch_dlpack_bridge headers ${torch_dlpack_bridge_VERSION}: ${torch_dlpack_bridge_INCLUDE_DIR}")
endif()
