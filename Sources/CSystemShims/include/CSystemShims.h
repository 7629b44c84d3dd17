#ifndef GROUPCONTAINER_CSYSTEMSHIMS_H
#define GROUPCONTAINER_CSYSTEMSHIMS_H
// C helpers for SystemLayer (and only SystemLayer): calls Swift cannot make itself (variadic `syscall`,
// _GNU_SOURCE-only functions) and a SIGBUS guard, which must run inside a signal handler.
#include <stddef.h>
#include <stdint.h>
#include <time.h>

// futex(2) on a 32-bit word in a MAP_SHARED file mapping (shared, not FUTEX_PRIVATE: other processes wait on it).
// Returns 0 when woken (or spuriously), -1 with errno (EAGAIN: the word was not `expected`; ETIMEDOUT; EINTR).
int gc_futex_wait(uint32_t *word, uint32_t expected, const struct timespec *relative_timeout);
/// Makes the calling thread SCHED_BATCH (woken, it does not preempt the running thread). 0, or -1 with errno.
int gc_sched_batch_self(void);
// Wakes up to `count` waiters; returns how many were woken, or -1 with errno.
int gc_futex_wake(uint32_t *word, int count);

// fallocate(2) with mode 0: allocates blocks (so a full disk is an ENOSPC here, never a SIGBUS on a later store
// through a mapping) and extends the file size.
int gc_fallocate(int fd, int64_t offset, int64_t length);

// sync_file_range(2) with SYNC_FILE_RANGE_WRITE: starts writing the range's dirty pages to the device and returns
// without waiting for them (a hint: it makes nothing durable, it only lets a later fdatasync find less to do).
int gc_start_writeback(int fd, int64_t offset, int64_t length);

// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: resolves `path` without ever leaving `dirfd` (a `..` or
// an absolute symlink that would leave fails with EXDEV). -1 with errno ENOSYS on kernels before 5.6.
int gc_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode);

// openat2(2) of `path` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: fails with ELOOP at the first symbolic link on
// the way (the last component included), so a success proves there is none. With `directory` 1, opened O_RDONLY |
// O_DIRECTORY | O_CLOEXEC (a directory to read or fsync); with 2, O_PATH | O_DIRECTORY | O_CLOEXEC (a directory only
// used as the base of *at calls); with 3, O_PATH | O_CLOEXEC (anything, as a handle); with 0, a check that opens nothing: it always fails, with EISDIR (a directory) or
// ENOTDIR (anything else, never blocking on a FIFO) when the whole path resolved without a link. -1 with errno
// ENOSYS before Linux 5.6.
int gc_openat_beneath_no_symlinks(int dirfd, const char *path, int directory);

// renameat2(2) with RENAME_EXCHANGE: atomically swaps two names (tests use it to race path checks).
int gc_rename_exchange(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);

// renameat2(2) with RENAME_NOREPLACE in one directory: publishes a file under a name only if the name is free
// (a handed-over file never replaces one already in the receiver's Inbox).
int gc_rename_noreplace(int dirfd, const char *oldpath, const char *newpath);

// The SIGBUS guard. A shared mapping of a file that someone truncates raises SIGBUS on the next access to a lost
// page. For a registered range, the handler maps a private zero page over the faulting page and counts the fault,
// so the access completes (reads zeros, writes go nowhere) and the owner sees the count change and treats the file
// as corrupt. Faults outside every registered range go to the previous handler (the default: the process dies).
// Returns a slot for `gc_guard_faults`/`gc_guard_unregister`, or -1 when all slots are taken.
int gc_guard_register(void *base, size_t length);
void gc_guard_unregister(int slot);
// How many faults the range of `slot` has taken since it was registered.
uint32_t gc_guard_faults(int slot);

// eventfd(2) (sys/eventfd.h is not in the Glibc module): cgroup v1 memory.pressure_level events need one.
int gc_eventfd(unsigned int initval, int nonblocking_cloexec);
// malloc_trim(3): gives the heap's free memory back to the kernel after memory warnings released it.
int gc_malloc_trim(size_t pad);
// mallopt(M_ARENA_MAX, count): glibc's malloc.h is not part of Swift's Glibc module.
int gc_malloc_arena_max(int count);
// mallopt(M_TRIM_THRESHOLD, trim) and mallopt(M_MMAP_THRESHOLD, mmap): 1 when both were set.
int gc_malloc_fixed_thresholds(size_t trim, size_t mmap);
// mallinfo2(3): bytes malloc has handed out and not had back (every arena, and the chunks it mapped alone).
size_t gc_malloc_bytes_in_use(void);

// statfs(2) (sys/statfs.h is not in the Glibc module): the file system's f_type magic number (as unsigned 32 bits),
// block size, total blocks, blocks free to unprivileged users and free inodes.
int gc_statfs(const char *path, uint64_t *type, uint64_t *block_size, uint64_t *blocks, uint64_t *available,
              uint64_t *free_inodes);

// Starts `path` as a detached process: its own session (setsid, so the terminal's signals and the parent's exit do
// not reach it), stdin from /dev/null, stdout and stderr to `output_fd`, no other descriptor inherited. Returns 0
// and the pid, or an errno value.
int gc_spawn_detached(const char *path, char *const argv[], char *const envp[], int output_fd, int *pid);

// Starts `path` with stdin from `input_fd` (/dev/null when negative), stdout and stderr to `output_fd` and
// `error_fd`, no other descriptor inherited, default signal dispositions and an empty mask. `detach`: its own
// session (gc_spawn_detached); otherwise its own process group. Returns 0 and the pid, or an errno value.
int gc_spawn(const char *path, char *const argv[], char *const envp[], int input_fd, int output_fd, int error_fd,
             int detach, int *pid);

// A thread's mark: two words one function leaves for code it calls later on the same thread (a coordinated write's
// checked item, CheckedWrite.swift). Thread-local storage: no lock, no allocation.
void gc_thread_mark_set(uintptr_t owner, uint64_t key);
uintptr_t gc_thread_mark_owner(void);
uint64_t gc_thread_mark_key(void);


// Unix datagram sockets: a process's inbox receives coordination messages on one (MessageProtocol.swift).
// A socket (SOCK_CLOEXEC | SOCK_NONBLOCK) bound at `name` in the directory `dirfd`, reached through
// /proc/self/fd (sun_path holds 108 bytes; a container's path may be longer), then given `mode` through an O_PATH
// descriptor of what was bound (never through a link planted meanwhile). A stale socket file is replaced.
// -1 with errno.
int gc_dgram_bind(int dirfd, const char *name, unsigned int mode);
// A socket connected to the socket file that the O_PATH descriptor `pathfd` refers to (through /proc/self/fd: no
// path is resolved again, so no link is followed). ENOTSOCK when it is not a socket. -1 with errno.
int gc_dgram_connect(int pathfd);
// One datagram, never blocking (MSG_DONTWAIT | MSG_NOSIGNAL): -1 with EAGAIN when the receiver's queue is full.
long gc_dgram_send(int fd, const void *bytes, unsigned long count);
// A socket connected to nothing (SOCK_CLOEXEC | SOCK_NONBLOCK), for gc_dgram_send_to. -1 with errno.
int gc_dgram_unconnected(void);
// One datagram from `fd` to the socket file that the O_PATH descriptor `pathfd` refers to (through /proc/self/fd, as
// gc_dgram_connect), never blocking: -1 with EAGAIN when the receiver's queue is full, ECONNREFUSED when nobody
// receives there or it is no socket.
long gc_dgram_send_to(int fd, int pathfd, const void *bytes, unsigned long count);
// The next datagram, never blocking: its real length (more than `capacity`: it was truncated), or -1 with EAGAIN
// when none is waiting.
long gc_dgram_receive(int fd, void *buffer, unsigned long capacity);

#endif
