# stasis_no_sanitizers(): the calling directory builds code that runs where
# no sanitizer runtime can be (LD_PRELOADed into unmodified programs, the
# freestanding restorer, the split process's two halves): drop every
# -fsanitize option the build configuration added, whatever it is.
# A macro, so the flag variables change in the caller's scope.
macro(stasis_no_sanitizers)
  set_property(DIRECTORY PROPERTY COMPILE_OPTIONS -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes)
  set_property(DIRECTORY PROPERTY LINK_OPTIONS "")
  foreach(v CMAKE_C_FLAGS CMAKE_C_FLAGS_DEBUG CMAKE_C_FLAGS_RELWITHDEBINFO CMAKE_C_FLAGS_RELEASE
            CMAKE_SHARED_LINKER_FLAGS CMAKE_EXE_LINKER_FLAGS)
    string(REGEX REPLACE "-fsanitize[^ ]*" "" ${v} "${${v}}")
  endforeach()
endmacro()
