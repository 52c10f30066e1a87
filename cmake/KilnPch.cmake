# Note [Precompiled headers]
# A kiln test or tool spends most of its compile time in headers it shares
# with every other: tests/test_util.h (GoogleTest and all of kiln.h, ~3 s a
# file), CLI11 (header-only, ~6 s a file of tools/), nlohmann/json. Each
# target that has such a set parses it once into a precompiled header
# (CMake's target_precompile_headers: GCC's -include of a .gch), which CI's
# three builds (Release, ASan + UBSan, the GPU kit's) would otherwise parse
# in every one of its files. Only headers every file of the target could
# include go in, so a file still compiles without the PCH (KILN_PCH=OFF, what
# a build that wants to catch a missing #include should use). Sources with
# their own compile options (core/cpu/'s -fno-trapping-math, the emulated
# .cu files' -xc++) skip it: GCC would refuse a PCH built with other flags.
option(KILN_PCH "Precompile the headers each target's files share (Note [Precompiled headers])" ON)

# kiln_precompile(TARGET header...): <...> for system headers, plain paths
# (absolute or relative to the target's source directory) for kiln's own.
function(kiln_precompile target)
  if(KILN_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

# kiln_precompile_like(TARGET FROM): TARGET reuses FROM's precompiled header
# (same compile options and definitions needed, as the fuzz targets have).
function(kiln_precompile_like target from)
  if(KILN_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()
