// The entities the server answers with: generated content, files of --root, short texts; and how their bytes are
// read a chunk at a time (nothing holds a whole body).
import Glibc
import NIOCore

/// Where a response body's bytes come from.
enum BodySource {
  case generated(seed: UInt64)
  case file(OpenFile)
  case text(ByteBuffer)

  /// `count` bytes from `offset` of the entity.
  func read(offset: Int64, count: Int, allocator: ByteBufferAllocator) throws(ReadFailure) -> ByteBuffer {
    switch self {
    case .generated(let seed):
      var buffer = allocator.buffer(capacity: count)
      buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
        GeneratedContent.fill(UnsafeMutableRawBufferPointer(rebasing: raw[..<count]), seed: seed, from: UInt64(offset))
        return count
      }
      return buffer
    case .file(let file):
      return try file.read(offset: offset, count: count, allocator: allocator)
    case .text(let text):
      return text.getSlice(at: text.readerIndex + Int(offset), length: count)!
    }
  }
}

struct ReadFailure: Error {
  var message: String
}

/// A regular file of --root, open for reading; closed when the last response using it is gone.
final class OpenFile {
  let descriptor: Int32
  let path: String
  let size: Int64
  let modifiedNanoseconds: Int64
  let inode: UInt64

  /// Opens `name` (one path component) in `root` without following a symbolic link; nil when it is not a regular
  /// file there (missing, a link, a directory, a FIFO…).
  init?(root: String, name: String) {
    path = root + "/" + name
    // O_NONBLOCK: a FIFO planted in the root must not block the event loop in open().
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { return nil }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
      close(fd)
      return nil
    }
    descriptor = fd
    size = Int64(info.st_size)
    modifiedNanoseconds = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    inode = UInt64(info.st_ino)
  }

  deinit { close(descriptor) }

  /// Reads with pread on the event loop: these are local files for tests and the demo, mostly in the page cache.
  func read(offset: Int64, count: Int, allocator: ByteBufferAllocator) throws(ReadFailure) -> ByteBuffer {
    var buffer = allocator.buffer(capacity: count)
    var failure: ReadFailure?
    buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
      var done = 0
      while done < count {
        let n = pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
        if n > 0 {
          done += n
        } else if n < 0 && errno == EINTR {
          continue
        } else {
          let reason = n == 0 ? "the file is shorter than when the response began" : String(cString: strerror(errno))
          failure = ReadFailure(message: "cannot read \(path) at offset \(Int64(done) + offset): \(reason)")
          break
        }
      }
      return done
    }
    if let failure { throw failure }
    return buffer
  }
}

/// The wall clock in seconds: the Date of every response.
func currentSeconds() -> Int64 { Int64(time(nil)) }

/// What a GET or HEAD of a resource answers: its size, validators and bytes.
struct Entity {
  var size: Int64
  var etag: String?
  /// Seconds since 1970 (sent clamped to the response's Date).
  var lastModified: Int64?
  var body: BodySource
}

/// `/gen/<size>?seed=S` as request number `number` of its target sees it (`etag=rotate` makes each request a new
/// entity).
func generatedEntity(sizeText: Substring, seedText: String?, rotation: Int?) throws(BadRequest) -> Entity {
  guard let size = Int64(sizeText), size >= 0 else {
    throw BadRequest(message: "bad size in /gen/\(sizeText): expected a number of bytes, e.g. /gen/1048576?seed=1")
  }
  var seed: UInt64 = 0
  if let seedText {
    guard let value = UInt64(seedText) else {
      throw BadRequest(message: "bad query parameter seed=\(seedText): expected an unsigned integer")
    }
    seed = value
  }
  var tag = "g-\(size)-\(seed)"
  if let rotation {
    seed &+= UInt64(rotation)
    tag += "-r\(rotation)"
  }
  return Entity(
    size: size, etag: "\"\(tag)\"", lastModified: 1_600_000_000 + Int64(seed % 100_000_000),
    body: .generated(seed: seed))
}

/// `/files/<name>`: nil (404) unless `name` is one plain path component naming a regular file of the root.
func fileEntity(root: String, encodedName: Substring) -> Entity? {
  guard let name = percentDecoded(encodedName), !name.isEmpty, name != ".", name != "..", !name.contains("/"),
    !name.utf8.contains(0), let file = OpenFile(root: root, name: name)
  else { return nil }
  let tag =
    "f-\(String(file.inode, radix: 16))-\(String(file.size, radix: 16))-\(String(file.modifiedNanoseconds, radix: 16))"
  let seconds =
    file.modifiedNanoseconds >= 0
    ? file.modifiedNanoseconds / 1_000_000_000 : (file.modifiedNanoseconds - 999_999_999) / 1_000_000_000
  return Entity(size: file.size, etag: "\"\(tag)\"", lastModified: seconds, body: .file(file))
}
