# The top-level CMakeLists.txt has no proto/ entry; the scheduler area owns
# proto/ and adds it from here (guarded, so a later top-level entry wins).
if(NOT TARGET pdserve_proto)
  add_subdirectory(${CMAKE_SOURCE_DIR}/proto ${CMAKE_BINARY_DIR}/proto)
endif()
