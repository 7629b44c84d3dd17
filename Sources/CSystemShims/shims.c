#define _GNU_SOURCE
#include "CSystemShims.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/futex.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

int gc_sched_batch_self(void) {
  struct sched_param parameters = {0};
  return sched_setscheduler(0, SCHED_BATCH, &parameters);
}

int gc_futex_wait(uint32_t *word, uint32_t expected, const struct timespec *relative_timeout) {
  return (int)syscall(SYS_futex, word, FUTEX_WAIT, expected, relative_timeout, NULL, 0);
}

int gc_futex_wake(uint32_t *word, int count) {
  return (int)syscall(SYS_futex, word, FUTEX_WAKE, count, NULL, NULL, 0);
}

int gc_fallocate(int fd, int64_t offset, int64_t length) { return fallocate(fd, 0, offset, length); }

int gc_start_writeback(int fd, int64_t offset, int64_t length) {
  return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

#ifdef SYS_openat2
// openat2 with RESOLVE_BENEATH fails with EAGAIN when a rename or mount anywhere on the system raced a ".." of the
// lookup (the kernel cannot prove the path stayed beneath): the call is to be retried. Bounded, so that a process
// renaming without pause cannot keep us spinning; past the bound the EAGAIN is the caller's error.
static int openat2_retrying(int dirfd, const char *path, struct open_how *how) {
  for (int attempt = 0;; attempt++) {
    int fd = (int)syscall(SYS_openat2, dirfd, path, how, sizeof *how);
    if (fd >= 0 || errno != EAGAIN || attempt == 1000) return fd;
  }
}
#endif

int gc_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode) {
#ifdef SYS_openat2
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(unsigned int)flags;
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;  // openat2 refuses a mode without O_CREAT
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return openat2_retrying(dirfd, path, &how);
#else
  errno = ENOSYS;
  return -1;
#endif
}

int gc_openat_beneath_no_symlinks(int dirfd, const char *path, int directory) {
#ifdef SYS_openat2
  struct open_how how;
  memset(&how, 0, sizeof how);
  // 1: a directory to read or fsync; 2: a directory used only as the base of *at calls (O_PATH: no open of the
  // directory itself, cheaper); 0: a check that never opens anything. O_WRONLY | O_DIRECTORY fails only once the
  // whole path is resolved: EISDIR for a directory (before any permission check), ENOTDIR for anything else, a
  // FIFO included. No descriptor is made, so none is closed: 1.73 µs here against 2.42 µs for O_PATH + close.
  // 3: anything, as a handle only (O_PATH: a socket file to connect to).
  how.flags = directory == 1 ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    : directory == 2 ? (O_PATH | O_DIRECTORY | O_CLOEXEC)
    : directory == 3 ? (O_PATH | O_CLOEXEC) : (O_WRONLY | O_DIRECTORY | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  return openat2_retrying(dirfd, path, &how);
#else
  errno = ENOSYS;
  return -1;
#endif
}

int gc_rename_exchange(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
  return renameat2(olddirfd, oldpath, newdirfd, newpath, RENAME_EXCHANGE);
}

int gc_rename_noreplace(int dirfd, const char *oldpath, const char *newpath) {
  return renameat2(dirfd, oldpath, dirfd, newpath, RENAME_NOREPLACE);
}

// One slot per live shared mapping (two per container a process opened, plus one or two per defaults suite);
// the handler scans them all, which is cheap next to a page fault.
#define GUARD_SLOTS 4096
// Written only under `lock` (outside the handler); read by the handler, hence atomics.
static _Atomic uintptr_t guard_start[GUARD_SLOTS];
static _Atomic uintptr_t guard_end[GUARD_SLOTS];
static _Atomic uint32_t guard_faults[GUARD_SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous;
static int installed;
static long page_size;  // read once before the handler is installed: sysconf is not async-signal-safe

// Runs inside a signal handler: only atomics and raw system calls (mmap is one) below.

static void on_sigbus(int signal, siginfo_t *info, void *context) {
  uintptr_t address = (uintptr_t)info->si_addr;
  for (int i = 0; i < GUARD_SLOTS; i++) {
    uintptr_t start = atomic_load(&guard_start[i]);
    if (start != 0 && address >= start && address < atomic_load(&guard_end[i])) {
      void *at = (void *)(address & ~(uintptr_t)(page_size - 1));
      if (mmap(at, (size_t)page_size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
        atomic_fetch_add(&guard_faults[i], 1);
        return;  // the faulting access is retried and now succeeds
      }
    }
  }
  // Not ours: behave as if we were never installed.
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_IGN && previous.sa_handler != SIG_DFL) {
    previous.sa_handler(signal);
  } else {
    struct sigaction fallback;
    memset(&fallback, 0, sizeof fallback);
    fallback.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &fallback, NULL);  // returning re-runs the access, which now kills the process as usual
  }
}

int gc_guard_register(void *base, size_t length) {
  int slot = -1;
  pthread_mutex_lock(&lock);
  if (!installed) {
    page_size = sysconf(_SC_PAGESIZE);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) == 0) installed = 1;
  }
  for (int i = 0; installed && i < GUARD_SLOTS; i++) {
    if (atomic_load(&guard_start[i]) == 0) {
      atomic_store(&guard_faults[i], 0);
      atomic_store(&guard_end[i], (uintptr_t)base + length);
      atomic_store(&guard_start[i], (uintptr_t)base);
      slot = i;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return slot;
}

void gc_guard_unregister(int slot) {
  if (slot < 0 || slot >= GUARD_SLOTS) return;
  pthread_mutex_lock(&lock);
  atomic_store(&guard_start[slot], 0);
  atomic_store(&guard_end[slot], 0);
  pthread_mutex_unlock(&lock);
}

uint32_t gc_guard_faults(int slot) {
  if (slot < 0 || slot >= GUARD_SLOTS) return 0;
  return atomic_load_explicit(&guard_faults[slot], memory_order_relaxed);
}

int gc_eventfd(unsigned int initval, int nonblocking_cloexec) {
  return eventfd(initval, nonblocking_cloexec ? (EFD_NONBLOCK | EFD_CLOEXEC) : 0);
}

int gc_malloc_trim(size_t pad) { return malloc_trim(pad); }
int gc_malloc_arena_max(int count) { return mallopt(M_ARENA_MAX, count); }
int gc_malloc_fixed_thresholds(size_t trim, size_t mmap) {
  return mallopt(M_TRIM_THRESHOLD, (int)trim) && mallopt(M_MMAP_THRESHOLD, (int)mmap);
}
size_t gc_malloc_bytes_in_use(void) {
  struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

int gc_spawn(const char *path, char *const argv[], char *const envp[], int input_fd, int output_fd, int error_fd,
             int detach, int *pid) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  int rc = posix_spawn_file_actions_init(&actions);
  if (rc != 0) return rc;
  rc = posix_spawnattr_init(&attributes);
  if (rc != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return rc;
  }
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  if (rc == 0)
    rc = input_fd < 0 ? posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                      : posix_spawn_file_actions_adddup2(&actions, input_fd, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, output_fd, 1);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, error_fd, 2);
  if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // Default dispositions and an empty mask: the parent may block or ignore signals the agent must get.
  if (rc == 0) rc = posix_spawnattr_setsigmask(&attributes, &none);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attributes, &all);
  // Detached: a session of its own. Otherwise a process group of its own, as Foundation's Process does (a
  // terminal's ^C reaches the starter, which decides).
  short group = detach ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP;
  if (rc == 0) rc = posix_spawnattr_setflags(&attributes, group | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t child = 0;
  if (rc == 0) rc = posix_spawn(&child, path, &actions, &attributes, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc == 0) *pid = (int)child;
  return rc;
}

int gc_spawn_detached(const char *path, char *const argv[], char *const envp[], int output_fd, int *pid) {
  return gc_spawn(path, argv, envp, -1, output_fd, output_fd, 1, pid);
}

int gc_statfs(const char *path, uint64_t *type, uint64_t *block_size, uint64_t *blocks, uint64_t *available,
              uint64_t *free_inodes) {
  struct statfs buffer;
  if (statfs(path, &buffer) != 0) return -1;
  *type = (uint32_t)buffer.f_type;  // a signed word: CIFS's 0xFF534D42 would come out negative
  *block_size = (uint64_t)buffer.f_bsize;
  *blocks = (uint64_t)buffer.f_blocks;
  *available = (uint64_t)buffer.f_bavail;
  *free_inodes = (uint64_t)buffer.f_ffree;
  return 0;
}

static __thread uintptr_t thread_mark_owner;
static __thread uint64_t thread_mark_key;

void gc_thread_mark_set(uintptr_t owner, uint64_t key) {
  thread_mark_owner = owner;
  thread_mark_key = key;
}

uintptr_t gc_thread_mark_owner(void) { return thread_mark_owner; }

uint64_t gc_thread_mark_key(void) { return thread_mark_key; }

static int proc_fd_address(struct sockaddr_un *address, int fd, const char *name) {
  memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  int length = name ? snprintf(address->sun_path, sizeof address->sun_path, "/proc/self/fd/%d/%s", fd, name)
                    : snprintf(address->sun_path, sizeof address->sun_path, "/proc/self/fd/%d", fd);
  if (length < 0 || (size_t)length >= sizeof address->sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

int gc_dgram_bind(int dirfd, const char *name, unsigned int mode) {
  struct sockaddr_un address;
  if (proc_fd_address(&address, dirfd, name) != 0) return -1;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int path = -1, saved;
  struct stat st;
  char proc[64];
  int bound = bind(fd, (struct sockaddr *)&address, sizeof address);
  if (bound != 0 && errno == EADDRINUSE) {  // left by an earlier bind: nobody receives on it any more
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode)) unlinkat(dirfd, name, 0);
    bound = bind(fd, (struct sockaddr *)&address, sizeof address);
  }
  if (bound != 0) goto fail;
  path = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (path < 0 || fstat(path, &st) != 0) goto fail;
  if (!S_ISSOCK(st.st_mode)) {
    errno = ENOTSOCK;
    goto fail;
  }
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", path);
  if (chmod(proc, mode) != 0) goto fail;
  close(path);
  return fd;
fail:
  saved = errno;
  if (path >= 0) close(path);
  close(fd);
  errno = saved;
  return -1;
}

int gc_dgram_connect(int pathfd) {
  struct stat st;
  if (fstat(pathfd, &st) != 0) return -1;
  if (!S_ISSOCK(st.st_mode)) {
    errno = ENOTSOCK;
    return -1;
  }
  struct sockaddr_un address;
  if (proc_fd_address(&address, pathfd, NULL) != 0) return -1;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

long gc_dgram_send(int fd, const void *bytes, unsigned long count) {
  return (long)send(fd, bytes, count, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int gc_dgram_unconnected(void) { return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0); }

long gc_dgram_send_to(int fd, int pathfd, const void *bytes, unsigned long count) {
  struct sockaddr_un address;
  if (proc_fd_address(&address, pathfd, NULL) != 0) return -1;
  return (long)sendto(fd, bytes, count, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&address, sizeof address);
}

long gc_dgram_receive(int fd, void *buffer, unsigned long capacity) {
  return (long)recv(fd, buffer, capacity, MSG_DONTWAIT | MSG_TRUNC);
}
