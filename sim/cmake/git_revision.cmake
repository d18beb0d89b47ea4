# Run at build time: write the source tree's git revision ("<sha>[-dirty]", or "unknown") into
# a C++ file, touching it only when the revision changed.
find_package(Git QUIET)
set(rev "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse HEAD
                  OUTPUT_VARIABLE sha RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(rc EQUAL 0)
    set(rev "${sha}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} diff --quiet HEAD --
                    RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      set(rev "${rev}-dirty")
    endif()
  endif()
endif()
set(content "// Generated at build time by sim/cmake/git_revision.cmake.\nnamespace halfway::sim {\nconst char* git_revision() { return \"${rev}\"; }\n}  // namespace halfway::sim\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUTPUT} "${content}")
endif()
