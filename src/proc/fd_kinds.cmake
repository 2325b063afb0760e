# The descriptor kinds (fd_ops.h), one file each: built into stasis_proc
# and into the split process's lower half (src/split), which share fds.c.
set(STASIS_PROC_FD_SOURCES
  ${CMAKE_SOURCE_DIR}/src/proc/fds.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_common.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_file.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_pipe.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_eventfd.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_timerfd.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_epoll.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_signalfd.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_inotify.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_socket.c
  ${CMAKE_SOURCE_DIR}/src/proc/fd_pty.c)
