#ifndef GROUPCONTAINER_CINOTIFYTOOLS_SHIM_H
#define GROUPCONTAINER_CINOTIFYTOOLS_SHIM_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <inotifytools/inotifytools.h>

// `name` is a flexible array member, which Swift does not import.
static inline const char *gc_inotify_event_name(const struct inotify_event *event) {
  return event->len > 0 ? event->name : "";
}
// glibc's pipe2 needs _GNU_SOURCE, which Swift's Glibc module does not set.
static inline int gc_pipe2(int fds[2], int flags) { return pipe2(fds, flags); }
// In Swift, `flock` names the fcntl lock struct before the function.
static inline int gc_flock(int fd, int operation) { return flock(fd, operation); }
#endif
