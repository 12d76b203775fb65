# Run by the build (cmake -P, target detfuse_git_commit) before the tuner is
# compiled, every build: writes OUT, a header defining DETFUSE_GIT_COMMIT as
# the commit of the source tree SRC, with "-dirty" when tracked files differ
# from it ("unknown" outside git; the environment variable DETFUSE_COMMIT, when set,
# names it instead). Read at build time rather than at configure
# time, so a binary built after an edit or a checkout never claims the commit
# the build folder was configured at. OUT is rewritten only when the value
# changes (no rebuild otherwise).
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE _commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _rc ERROR_QUIET)
if(DEFINED ENV{DETFUSE_COMMIT})
  # A copy of the tree without .git (experiments/device/build_there.sh) names its commit.
  set(_commit "$ENV{DETFUSE_COMMIT}")
elseif(NOT _rc EQUAL 0 OR NOT _commit)
  set(_commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no
                  WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_dirty)
    set(_commit "${_commit}-dirty")
  endif()
endif()
set(_content "// Generated at build time by cmake/git_commit.cmake: the source tree's commit.
#pragma once
#define DETFUSE_GIT_COMMIT R\"dfq(${_commit})dfq\"
")
set(_old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" _old)
endif()
if(NOT _old STREQUAL _content)
  file(WRITE "${OUT}" "${_content}")
endif()
