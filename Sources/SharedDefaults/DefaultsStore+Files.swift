import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// The suite's files other than the journal, each reached beneath the container's descriptor: the snapshot (an image,
/// SuiteImageFormat.swift), the plist, and files moved aside. A file that does not read is `Repair.corruptSnapshot`;
/// one over `snapshotLimits` is `Repair.overLimit` (refused, never treated as corrupt).
extension DefaultsStore {
  /// Reads the dictionary in the plist `item` (the export, or a tool's edit of it) with its status; an absent file
  /// is empty. A file over `snapshotLimits` is `overLimit` (refused, left where it is); one that does not parse is
  /// corrupt.
  func loadPlist(_ item: String) throws(Repair) -> ([String: PropertyListValue], FileStatus?) {
    let name = (item as NSString).lastPathComponent
    let path = directory + "/" + name
    let read: (bytes: [UInt8], status: FileStatus)
    do {
      read = try root.readFile(item, limit: Self.snapshotLimits.maxBytes)
    } catch {
      switch error.errno {
      case .noSuchFileOrDirectory: return ([:], nil)
      case .improperLink: throw .unreachable(.container(.pathEscapesContainer(item, container: containerPath)))
      case .fileTooLarge:
        throw .overLimit(.suiteTooLarge(path, "the file is over \(Self.snapshotLimits.maxBytes) bytes"))
      default: throw .corruptSnapshot(name, "cannot read: \(error)")
      }
    }
    let value: PropertyListValue
    do { value = try PropertyListValue(bytes: read.bytes, limits: Self.snapshotLimits) } catch {
      if error.kind == .limitExceeded { throw .overLimit(.suiteTooLarge(path, error.message)) }
      throw .corruptSnapshot(name, "\(error)")
    }
    guard case .dictionary(let dictionary) = value else {
      throw .corruptSnapshot(name, "the top level is not a dictionary")
    }
    return (dictionary, read.status)
  }

  /// Maps the image `item` (the snapshot, or the one before it): O(1), its header checked; nil when there is none.
  /// One that is not an image is corrupt; one over `snapshotLimits.maxBytes` is `overLimit`.
  func loadImage(_ item: String? = nil, counted: Bool = true) throws(Repair) -> SuiteImage? {
    let item = item ?? snapshotItem
    if item == snapshotItem && counted { Self.snapshotLoads.add() }
    let name = (item as NSString).lastPathComponent
    let fd: SystemFD
    do {
      fd = try root.openFile(item, .readOnly)
    } catch {
      switch error.errno {
      case .noSuchFileOrDirectory: return nil
      case .improperLink: throw .unreachable(.container(.pathEscapesContainer(item, container: containerPath)))
      default: throw .corruptSnapshot(name, "cannot open: \(error)")
      }
    }
    do { return try SuiteImage(mapping: fd) } catch {
      switch error {
      case .corrupt(let corruption): throw .corruptSnapshot(name, corruption.description)
      case .system(let error) where error.errno == .fileTooLarge:
        throw .overLimit(
          .suiteTooLarge(directory + "/" + name, "the file is over \(Self.snapshotLimits.maxBytes) bytes"))
      case .system(let error): throw .corruptSnapshot(name, "cannot map: \(error)")
      }
    }
  }

  /// The snapshot this process just wrote (`written`), mapped; nil if the name leads elsewhere or it cannot be.
  func mapSnapshot(written: FileStatus) -> SuiteImage? {
    guard let fd = try? root.openFile(snapshotItem, .readOnly), let image = try? SuiteImage(mapping: fd),
      image.status?.inode == written.inode
    else { return nil }
    return image
  }

  /// Whether `status` is the snapshot the header recorded (else a compaction died before recording it).
  func isRecordedSnapshot(_ st: FileStatus?) -> Bool { SuiteHeader.identity(st) == header.recordedSnapshot() }

  /// Whether the snapshot on disk is the one the header recorded (else a compaction died before recording it).
  func snapshotIsTheRecordedOne() throws(Repair) -> Bool {
    let st: FileStatus?
    do {
      st = try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in
        try root.status(snapshotItem)
      }
    } catch {
      throw .unreachable(error)
    }
    return isRecordedSnapshot(st)
  }

  /// Links the snapshot as `<suite>.snapshot.exported`, the image the export holds (a suite adopted from its plist,
  /// or converted), in the current generation.
  func pinExportBase() throws(FileSystemError) {
    try root.link(snapshotItem, to: "\(suite).snapshot.exported")
    header.store(Slot.exportGeneration, header.load(Slot.generation))
  }

  /// Replaces the snapshot with an image of `values` (a suite adopted from a plist) and records it.
  func writeImage(of values: [String: PropertyListValue]) throws(SharedDefaultsError) {
    let (base, changes) = SuiteValues(dictionary: values).imageParts
    let written = try writeImageFile(
      snapshotItem, base: base, changes: changes, generation: header.load(Slot.generation), position: 0)
    header.recordSnapshot(written.status)
  }

  /// Writes the image of `base` with `changes` over it as the file `item` (replaced atomically, streamed: no copy
  /// of the image is held in memory), refusing it before it is published when it is over the suite's limits
  /// (`checkLimits`). Returns what was built and the file's status.
  func writeImageFile(
    _ item: String, base: SuiteImage?, changes: [String: PropertyListValue?], generation: UInt64, position: Int,
    durability: AtomicReplace.Durability = .processCrash
  ) throws(SharedDefaultsError) -> (built: SuiteImageBuilder.Built, status: FileStatus) {
    // The builder's errors cross the replace's closure, which throws FileSystemError, kept aside.
    var refused: SharedDefaultsError?
    var built: SuiteImageBuilder.Built?
    let status: FileStatus
    do {
      status = try Self.beneath(item, in: containerPath) { () throws(FileSystemError) in
        try root.replaceFile(item, mode: fileMode, durability: durability) { (fd) throws(FileSystemError) in
          do throws(SharedDefaultsError) {
            let (made, _) = try SuiteImage.merge(
              base: base, changes: changes, generation: generation, position: UInt64(position),
              into: .file(fd.rawValue, path: fd.path))
            guard made.length <= Self.snapshotLimits.maxBytes else {
              header.store(Slot.overLimit, 1)
              throw .suiteTooLarge(directory + "/\(suite).snapshot", "it would be \(made.length) bytes")
            }
            _ = try checkLimits(objects: made.objects, payload: made.payload)
            built = made
          } catch {
            refused = error
            throw FileSystemError("write", item, .canceled)
          }
        }
      }
    } catch {
      throw refused ?? error
    }
    guard let built else { throw refused ?? .system(FileSystemError("write", item, .ioError)) }
    return (built, status)
  }

  /// Moves the file `name` of the suite's directory aside (`<name>.corrupt-<time>-<pid>`), renamed relative to
  /// the directory's descriptor.
  func quarantine(_ name: String) {
    let aside = name + ".corrupt-\(RealtimeClock.seconds())-\(CurrentProcess.id)"
    do { try root.rename(Self.preferences + "/" + name, to: aside) } catch {
      if error.errno != .noSuchFileOrDirectory {
        Self.logger.error("could not move '\(directory)/\(name)' aside: \(error)")
      }
    }
  }

  /// The snapshot's status (nil when there is none), read beneath the container's descriptor.
  func snapshotStatus() throws(SharedDefaultsError) -> FileStatus? {
    try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in try root.status(snapshotItem) }
  }

  /// Runs a call that reaches `item` beneath the container; a way out (a directory on the way swapped for a
  /// symlink that leads outside, which `RESOLVE_BENEATH` refuses with `EXDEV`) is `pathEscapesContainer`.
  static func beneath<T: ~Copyable>(
    _ item: String, in container: String, _ body: () throws(FileSystemError) -> T
  ) throws(SharedDefaultsError) -> T {
    do { return try body() } catch {
      guard error.errno == .improperLink else { throw .system(error) }
      throw .container(.pathEscapesContainer(item, container: container))
    }
  }
}
