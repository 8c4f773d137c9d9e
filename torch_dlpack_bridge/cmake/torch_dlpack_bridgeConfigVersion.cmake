# Version file of torch_dlpack_bridge's CMake package (see torch_dlpack_bridgeConfig.cmake).
# Compatible when the requested version is not newer and the major version is the same; for 0.x the minor
# version must match too (0.x releases may change the headers' API).
# tests/test_cmake_package.py checks that this version equals the Python package's.
set(PACKAGE_VERSION "0.1.0")

string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _tdb_version "${PACKAGE_VERSION}")
set(_tdb_major "${CMAKE_MATCH_1}")
set(_tdb_minor "${CMAKE_MATCH_2}")

if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT PACKAGE_FIND_VERSION_MAJOR EQUAL _tdb_major)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(_tdb_major EQUAL 0 AND NOT PACKAGE_FIND_VERSION_MINOR EQUAL _tdb_minor)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()

if(PACKAGE_FIND_VERSION AND PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
