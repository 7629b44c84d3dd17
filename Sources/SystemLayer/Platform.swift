// GroupContainer is built on Linux system interfaces (inotify through libinotifytools, futex, openat2 with
// RESOLVE_BENEATH, cgroup and PSI memory signals). Elsewhere the build would fail in a hundred places with
// "no such module" errors; this file makes it fail once, saying why.
#if !os(Linux)
  #error(
    "GroupContainer builds on Linux only: it needs inotify (libinotifytools), futex and openat2, which this platform does not have. On Apple platforms use App Groups, NSFileCoordinator and UserDefaults(suiteName:) directly."
  )
#endif
