import Foundation
import SystemLayer

/// The path rule: a container-relative path is a non-empty list of components, each a real name.
///
/// No absolute paths, no `.` or `..`, no empty components, no NUL, each component ≤ 255 bytes and the whole
/// ≤ 4,096 bytes, and nothing under the private `.coordination` directory. Every path that reaches the file
/// system from outside (API URLs, CLI arguments, presenter records, messages) passes through here first.
public struct ContainerPath: Hashable, Sendable, Comparable, CustomStringConvertible {
  /// The components, in order from the container root. Empty for the container root itself.
  public let components: [String]
  /// FNV-1a over the components' bytes, computed once: lock-table and registry lookups hash and compare paths on
  /// every access, and a path is made once and looked up several times (`CheckedWrite` marks an item by it too).
  package let bytesHash: UInt64

  /// The longest path component, in bytes (Linux's `NAME_MAX`).
  public static let maxComponentBytes = 255
  /// The longest path, in bytes (Linux's `PATH_MAX`).
  public static let maxPathBytes = 4096
  package static let privateDirectory = ".coordination"
  private static let privateDirectoryBytes = Array(privateDirectory.utf8)

  /// The container root.
  public static let root = ContainerPath(unchecked: [])

  package init(unchecked components: [String]) {
    self.components = components
    bytesHash = Self.hash(of: components)
  }

  private static func hash(of components: [String]) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for component in components {
      for byte in component.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
      hash = (hash ^ 0x2f) &* 0x100_0000_01b3  // a separator no name holds
    }
    return hash
  }

  /// `bytesHash` of the container root, of each ancestor from the top, and of this path last (`depth + 1` values,
  /// in one pass): the presenter registry's buckets on the way (PresenterRegistry.swift).
  package var prefixHashes: [UInt64] {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    var hashes = [hash]
    hashes.reserveCapacity(components.count + 1)
    for component in components {
      for byte in component.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
      hash = (hash ^ 0x2f) &* 0x100_0000_01b3
      hashes.append(hash)
    }
    return hashes
  }

  /// Validates a relative path such as `Library/Preferences/x.plist`. A trailing `/` is allowed.
  public init(_ relative: String) throws(GroupContainerError) {
    try Self.check(relative)
    var components: [String] = []
    var start = relative.utf8.startIndex
    for index in relative.utf8.indices where relative.utf8[index] == UInt8(ascii: "/") {
      components.append(String(Substring(relative.utf8[start..<index])))
      start = relative.utf8.index(after: index)
    }
    if start != relative.utf8.endIndex { components.append(String(Substring(relative.utf8[start...]))) }
    self.components = components
    bytesHash = Self.hash(of: components)
  }

  /// Throws unless `relative` is a valid path (see `init(_:)`), without making one: a message's paths are checked
  /// when it is decoded, and only those its receiver uses are made.
  package static func check(_ relative: String) throws(GroupContainerError) {
    guard !relative.isEmpty else { throw .invalidPath(relative, rule: "it is empty") }
    guard relative.utf8.count <= Self.maxPathBytes else {
      throw .invalidPath(String(relative.prefix(64)) + "…", rule: "it is longer than \(Self.maxPathBytes) bytes")
    }
    guard !relative.hasPrefix("/") else {
      throw .invalidPath(relative, rule: "absolute paths are not allowed; give a path relative to the container")
    }
    // Checked on the bytes (each path of every message comes here; `String` comparison and Character iteration
    // were most of it, then the UTF-8 view's indices), and the bytes are what the kernel sees. A trailing `/` ends
    // the last component.
    var text = relative  // `withUTF8` is mutating: a native copy, contiguous
    let broken = text.withUTF8 { bytes -> String? in
      var start = 0
      var isPrivate = false
      while start < bytes.count {
        var end = start
        var hasNUL = false
        while end < bytes.count && bytes[end] != UInt8(ascii: "/") {
          if bytes[end] == 0 { hasNUL = true }
          end += 1
        }
        let count = end - start
        if count == 0 { return "it has an empty component ('//')" }
        if count <= 2 && bytes[start] == UInt8(ascii: ".") && bytes[end - 1] == UInt8(ascii: ".") {
          return "'.' and '..' components are not allowed"
        }
        if hasNUL { return "it contains a NUL byte" }
        if count > Self.maxComponentBytes { return "a component is longer than \(Self.maxComponentBytes) bytes" }
        if start == 0 && count == privateDirectoryBytes.count {
          isPrivate = privateDirectoryBytes.withUnsafeBytes {
            RawMemory.equal($0.baseAddress, bytes.baseAddress, count: count)
          }
        }
        start = end + 1
      }
      return isPrivate ? "'.coordination' is the framework's private directory" : nil
    }
    if let broken { throw .invalidPath(relative, rule: broken) }
  }

  /// The path as `a/b/c` ("" for the root). Joined here, not by `joined(separator:)`: the standard library's runs
  /// unspecialised, and its first call in a process looked an associated type up at run time — a scan of every
  /// conformance record loaded, in a new process's first access.
  public var string: String {
    guard let first = components.first else { return "" }
    var path = ""
    path.reserveCapacity(components.reduce(components.count - 1) { $0 + $1.utf8.count })
    path += first
    for component in components.dropFirst() {
      path += "/"
      path += component
    }
    return path
  }

  /// Calls `body` with `string` as a C string, built on the stack (no `String` made: every access's link check
  /// passes its item this way, and `joined` was a twentieth of an empty access).
  package func withCString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
    let count = components.reduce(components.count) { $0 + $1.utf8.count }  // the bytes, the `/`s and the NUL
    return try withUnsafeTemporaryAllocation(of: CChar.self, capacity: max(count, 1)) { buffer in
      var at = 0
      for component in components {
        if at > 0 {
          buffer[at] = CChar(bitPattern: UInt8(ascii: "/"))
          at += 1
        }
        for byte in component.utf8 {
          buffer[at] = CChar(bitPattern: byte)
          at += 1
        }
      }
      buffer[at] = 0
      return try body(buffer.baseAddress!)
    }
  }

  /// The path as `string`.
  public var description: String { string }
  /// The number of components (0 for the container root).
  public var depth: Int { components.count }
  /// Whether this is the container itself.
  public var isRoot: Bool { components.isEmpty }
  /// The last component ("" for the root).
  public var lastComponent: String { components.last ?? "" }

  /// The path without its last component; nil for the root.
  public var parent: ContainerPath? {
    isRoot ? nil : ContainerPath(unchecked: Array(components.dropLast()))
  }

  /// The proper ancestors, outermost first, excluding the root.
  public var ancestors: [ContainerPath] {
    guard depth > 1 else { return [] }
    return (1..<depth).map { ContainerPath(unchecked: Array(components[0..<$0])) }
  }

  /// This path with one more component (not checked: pass a single valid name).
  public func appending(_ component: String) -> ContainerPath {
    ContainerPath(unchecked: components + [component])
  }

  /// True when `self` lies strictly inside `other`.
  public func isDescendant(of other: ContainerPath) -> Bool {
    components.count > other.components.count
      && zip(components, other.components).allSatisfy { Self.sameBytes($0, $1) }
  }

  // Equality, hashing and order compare BYTES. Linux names are bytes: `café` spelt NFC and NFD are two files, two
  // locks and two presented items, while Swift's `String ==` calls them equal (canonical equivalence).

  /// Paths are equal when their components are equal byte for byte (NFC and NFD spellings differ, as on Linux).
  public static func == (lhs: ContainerPath, rhs: ContainerPath) -> Bool {
    lhs.bytesHash == rhs.bytesHash && lhs.components.count == rhs.components.count
      && zip(lhs.components, rhs.components).allSatisfy { sameBytes($0, $1) }
  }

  /// Byte equality of two names; memcmp where the bytes are contiguous (native strings: lock-table lookups
  /// compare keys on every access).
  package static func sameBytes(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    let fast = a.utf8.withContiguousStorageIfAvailable { a in
      b.utf8.withContiguousStorageIfAvailable { b in
        RawMemory.equal(a.baseAddress, b.baseAddress, count: a.count)
      }
    }
    return (fast ?? nil) ?? a.utf8.elementsEqual(b.utf8)
  }

  /// Hashes the components' bytes (their hash, computed once), consistently with `==`.
  public func hash(into hasher: inout Hasher) { hasher.combine(bytesHash) }

  /// `self` with the prefix `old` replaced by `new` (for moves of an ancestor).
  package func rebased(from old: ContainerPath, to new: ContainerPath) -> ContainerPath {
    ContainerPath(unchecked: new.components + components.dropFirst(old.components.count))
  }

  /// The lock order: by depth, then by path (bytes). Taking locks in this order cannot deadlock.
  public static func < (lhs: ContainerPath, rhs: ContainerPath) -> Bool {
    if lhs.depth != rhs.depth { return lhs.depth < rhs.depth }
    for (l, r) in zip(lhs.components, rhs.components) where !l.utf8.elementsEqual(r.utf8) {
      return l.utf8.lexicographicallyPrecedes(r.utf8)
    }
    return false
  }
}

extension ContainerPath {
  /// The container-relative path of the file URL `url` in the container at `base`, judged on the URL's
  /// percent-encoded path as bytes: nil whenever that is not plainly possible — a relative URL, a `%` escape, a
  /// `.`, `..` or empty component, a path not under `base`, or a component the path rule refuses — and then the
  /// caller takes the exact route (`standardizedFileURL`, `ContainerPath.init`), which also says what is wrong.
  /// For the URLs the fast route accepts, both routes give the same path; it only skips Foundation's
  /// standardization, the costliest part of setting up an access.
  package static func lexical(_ url: URL, in base: String) -> ContainerPath? {
    guard url.isFileURL, url.baseURL == nil else { return nil }
    var path = url.path(percentEncoded: true)
    var base = base
    return path.withUTF8 { path in base.withUTF8 { base in lexical(path: path, base: base) } }
  }

  /// `lexical(_:in:)` on bytes: `path` is an absolute, still percent-encoded path.
  package static func lexical(path: UnsafeBufferPointer<UInt8>, base: UnsafeBufferPointer<UInt8>) -> ContainerPath? {
    guard isInside(path, base) else { return nil }
    if path.count == base.count { return .root }
    let slash = UInt8(ascii: "/")
    var end = path.count
    if end > base.count + 1 && path[end - 1] == slash { end -= 1 }  // a directory URL's trailing `/`
    guard end - base.count - 1 <= maxPathBytes else { return nil }
    if end == base.count + 1 { return .root }
    var components: [String] = []
    components.reserveCapacity(path[(base.count + 1)..<end].reduce(1) { $0 + ($1 == slash ? 1 : 0) })
    var start = base.count + 1
    while start <= end {
      var stop = start
      while stop < end && path[stop] != slash { stop += 1 }
      let component = UnsafeBufferPointer(rebasing: path[start..<stop])
      // Empty, `.`, `..`, too long, NUL or `%` (an escape to decode): the exact route decides.
      guard !component.isEmpty, component.count <= maxComponentBytes,
        !(component.count == 1 && component[0] == UInt8(ascii: ".")),
        !(component.count == 2 && component[0] == UInt8(ascii: ".") && component[1] == UInt8(ascii: ".")),
        !component.contains(0), !component.contains(UInt8(ascii: "%"))
      else { return nil }
      components.append(String(decoding: component, as: UTF8.self))
      start = stop + 1
    }
    guard components.first != privateDirectory else { return nil }
    return ContainerPath(unchecked: components)
  }

  /// Whether the absolute path `path` is `base` or lies beneath it, by bytes (`base` without a trailing `/`).
  package static func isInside(_ path: UnsafeBufferPointer<UInt8>, _ base: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let basePath = base.baseAddress, let itemPath = path.baseAddress, base.count > 1,
      base.last != UInt8(ascii: "/"), path.count >= base.count, RawMemory.equal(itemPath, basePath, count: base.count)
    else { return false }
    return path.count == base.count || path[base.count] == UInt8(ascii: "/")
  }
}

/// Resolves symlinks in `item` beneath the container at `containerPath`: the container path it really names, or
/// `nil` when nothing on the way is a symlink. Throws when a link leads outside the container or into its
/// private directory. Dangling links are judged by their target text.
///
/// With `root` (the container's descriptor), one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` first asks the
/// kernel whether any link is on the way at all (`ContainerDirectory.hasNoSymbolicLink`); only when one is (or the
/// kernel cannot say) is the path walked component by component as below, so every answer and error is the walk's.
package func resolveBeneath(
  _ item: ContainerPath, containerPath: String, root: ContainerDirectory? = nil, depth: Int = 0
) throws(GroupContainerError) -> ContainerPath? {
  guard depth < 40 else { throw .invalidPath(item.string, rule: "too many levels of symbolic links") }
  if depth == 0, let root, item.withCString({ root.hasNoSymbolicLink(cString: $0) }) { return nil }
  var current = containerPath
  for (index, component) in item.components.enumerated() {
    current += "/" + component
    let st = try GroupContainerError.wrap { () throws(FileSystemError) in try FileSystem.status(current) }
    guard let st else { return depth > 0 ? item : nil }
    guard st.kind == .symlink else { continue }
    let real: String
    do { real = try FileSystem.realPath(current) } catch {
      let target = (try? FileSystem.readLink(current)) ?? ""
      let joined = target.hasPrefix("/") ? target : (current as NSString).deletingLastPathComponent + "/" + target
      real = (joined as NSString).standardizingPath
    }
    let base = (try? FileSystem.realPath(containerPath)) ?? containerPath
    guard real == base || real.hasPrefix(base + "/") else {
      throw .pathEscapesContainer(item.string, container: containerPath)
    }
    let inside = real == base ? [] : real.dropFirst(base.count + 1).split(separator: "/").map(String.init)
    let rebuilt = ContainerPath(unchecked: inside + item.components.dropFirst(index + 1))
    // The link was swapped for a directory meanwhile: judge the path as it is now.
    if rebuilt == item { continue }
    if rebuilt.components.first == ContainerPath.privateDirectory {
      throw .invalidPath(item.string, rule: "it leads into the framework's private directory")
    }
    return try resolveBeneath(rebuilt, containerPath: containerPath, depth: depth + 1) ?? rebuilt
  }
  return depth > 0 ? item : nil
}
