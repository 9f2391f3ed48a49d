# `cmake --install` puts the library, the public headers and a package config in the prefix so
# that consumers write find_package(hopattn) and link hopattn::hopattn.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS hopattn EXPORT hopattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hopattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT hopattnTargets NAMESPACE hopattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hopattn)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hopattnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/hopattnConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hopattn)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/hopattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/hopattnConfig.cmake ${CMAKE_BINARY_DIR}/hopattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hopattn)
if(HOPATTN_BUILD_BENCH)
  install(TARGETS hopattn-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
