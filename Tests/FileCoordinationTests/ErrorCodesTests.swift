import Foundation
import GroupContainer
import TestSupport
import Testing

/// Errors that can grow (issue #35, item 5): what a client sees of the package's errors, through the umbrella module
/// alone — codes it compares and switches on (with a `default`, so a new code breaks nothing), the failed system
/// call under an error as a type it can name, and the messages of before the errors became structs.
///
/// Mutants this suite catches:
/// - an error's `code` mapping a failure to another code: the `code ==` expectations fail.
/// - `underlyingError` returning nil for a system failure (or not looking inside a container error): the errno
///   expectations fail.
/// - a changed word in any representative message: `messagesAreUnchanged` fails.
@Suite struct ErrorCodesTests {
  /// What a client's `switch` looks like: known codes, and a `default` for codes added later.
  func advice(_ code: GroupContainerError.Code) -> String {
    switch code {
    case .invalidIdentifier, .invalidPath: "fix the name"
    case .system: "look at the system error"
    default: "report it"
    }
  }

  @Test func aClientReadsTheCodeAndTheErrnoOfAMissingFile() throws {
    let root = try TestRoot()
    let container = try root.container("group.com.example.error-codes")
    let missing = container.documentsURL.appendingPathComponent("missing.txt")
    do {
      _ = try container.contents(of: missing)
      Issue.record("reading a missing file succeeded")
    } catch {
      #expect(error.code == .system)
      #expect(advice(error.code) == "look at the system error")
      let system = try #require(error.underlyingError)
      #expect(system.errno == ENOENT)
      #expect(system.path.hasSuffix("missing.txt"), "\(system)")
      #expect(!system.operation.isEmpty)
      #expect(error.description == system.description)
      #expect(error.path == system.path)
    }
  }

  @Test func aClientComparesCodesAndReadsTheirDetails() throws {
    let root = try TestRoot()
    do {
      _ = try GroupContainer(identifier: "a/../b", root: root.url)
      Issue.record("an identifier with '/' was accepted")
    } catch {
      #expect(error.code == .invalidIdentifier)
      #expect(advice(error.code) == "fix the name")
      #expect(error.path == "a/../b")
      #expect(error.reason?.isEmpty == false)
      #expect(error.underlyingError == nil)
    }
    // A code prints as its name (for logs), and errors are equal when their code and details are.
    #expect("\(GroupContainerError.Code.inboxIsReadOnly)" == "inboxIsReadOnly")
    #expect(GroupContainerError.notInContainer("/tmp/x") == .notInContainer("/tmp/x"))
    #expect(GroupContainerError.notInContainer("/tmp/x") != .notInContainer("/tmp/y"))
    // An error inside another: the coordinator's container refusal, and the system error under both.
    let inner = GroupContainerError.inboxIsReadOnly("Documents/Inbox/a.txt")
    let outer = FileCoordinatorError.container(inner)
    #expect(outer.code == .container && outer.containerError == inner && outer.item == "Documents/Inbox/a.txt")
    let lock = FileCoordinatorError.lockTimedOut(item: "Documents/x", holderPID: 42, seconds: 1.5)
    #expect(lock.code == .lockTimedOut && lock.item == "Documents/x" && lock.processID == 42 && lock.seconds == 1.5)
    let url = FileCoordinatorError.openURL(.unknownScheme("nobody"))
    #expect(url.openURLError?.code == .unknownScheme && url.openURLError?.subject == "nobody")
  }

  @Test func aClientCanMakeASystemErrorAndReadIt() {
    let error = SystemError(operation: "open", path: "/tmp/x", errno: ENOENT)
    #expect(error.errno == ENOENT && error.operation == "open" && error.path == "/tmp/x" && error.reason == nil)
    #expect(error.description == "open '/tmp/x' failed: No such file or directory (errno 2)")
    let explained = SystemError(operation: "openat2", path: "Documents/a", errno: ENOENT, reason: "it is gone")
    #expect(explained.description == "openat2 'Documents/a' failed: it is gone (No such file or directory, errno 2)")
    #expect(Set([error, error]).count == 1)
    // A client's test double: a feature error made from a system error reads back the same errno and message.
    let denied = SystemError(operation: "open", path: "/data/a", errno: EACCES)
    let wrapped = SharedDefaultsError.system(denied)
    #expect(wrapped.code == .system && wrapped.underlyingError == denied && wrapped.description == denied.description)
    #expect(DownloadError.container(.system(denied)).underlyingError?.errno == EACCES)
  }

  @Test func sharedDefaultsErrorsHaveCodes() {
    do {
      try SharedDefaults.validate(suiteName: "a/../b")
      Issue.record("a suite name with '/' was accepted")
    } catch {
      #expect(error.code == .invalidSuiteName && error.path == "a/../b" && error.reason?.isEmpty == false)
    }
    let big = SharedDefaultsError.valueTooLarge("big", 1_048_576)
    #expect(big.code == .valueTooLarge && big.key == "big" && big.limit == 1_048_576 && big.underlyingError == nil)
    let refused = SharedDefaultsError.container(.invalidPath("../x", rule: "no '..'"))
    #expect(refused.code == .container && refused.containerError?.code == .invalidPath && refused.path == "../x")
  }

  /// What a download client does with a task's error: act on the codes it knows, show the rest.
  func outcome(_ error: DownloadError?) -> String {
    guard let error else { return "done" }
    switch error.code {
    case .cancelled: return "cancelled"
    case .httpStatus: return "HTTP \(error.httpStatus ?? 0)"
    case .diskFull: return "free space on \(error.path ?? "?")"
    default: return error.description
    }
  }

  @Test func featureErrorsHaveCodes() {
    #expect(outcome(nil) == "done")
    #expect(outcome(.cancelled) == "cancelled")
    #expect(outcome(.httpStatus(404)) == "HTTP 404")
    #expect(outcome(.diskFull(path: "/data")) == "free space on /data")
    #expect(outcome(.network("reset")) == "the download failed after its retries: reset")
    #expect(DownloadError.sessionInUse("s", pid: 7).processID == 7)
    #expect(DownloadError.lengthMismatch(expected: 10, actual: 9).lengths?.actual == 9)
    #expect(DownloadError.container(.invalidPath("x", rule: "r")).containerError?.code == .invalidPath)

    let image = ImageCacheError.tooLarge(bytes: 10, limit: 5)
    #expect(image.code == .tooLarge && image.bytes == 10 && image.limit == 5)
    #expect(ImageCacheError.malformed(.png, reason: "cut").format == .png)
    do {
      _ = try ImageHeaders.parse(Data("hello".utf8))
      Issue.record("text parsed as an image")
    } catch {
      #expect(error.code == .unsupportedFormat)
    }

    let activity = ActivityError.contentStateTooLarge(bytes: 5000, limit: 4096)
    #expect(activity.code == .contentStateTooLarge && activity.bytes == 5000 && activity.limit == 4096)
    #expect(ActivityError.denied(group: "g").group == "g")

    let intent = IntentError.delivery(.unknownScheme("timer"))
    #expect(intent.code == .delivery && intent.deliveryError?.code == .unknownScheme)
    #expect(IntentError.interrupted("Start", deliveryID: "d1").deliveryID == "d1")
  }

  /// The messages of today's errors, spelled out: the move to structs must not change a word.
  @Test func messagesAreUnchanged() {
    let cases: [(any Error & CustomStringConvertible, String)] = [
      (
        GroupContainerError.invalidIdentifier("a/../b", rule: "only A-Z a-z 0-9 . - are allowed"),
        "container identifier 'a/../b' is invalid: only A-Z a-z 0-9 . - are allowed"
      ),
      (
        GroupContainerError.inboxIsReadOnly("Documents/Inbox/a.txt"),
        "'Documents/Inbox/a.txt' is in Documents/Inbox, where files handed over by other apps arrive: it can be read, "
          + "deleted or moved out, not written; move the file out of the Inbox (e.g. to Documents/) and change it there"
      ),
      (FileCoordinatorError.cancelled, "the coordinated access was cancelled before its accessor ran"),
      (
        FileCoordinatorError.lockTimedOut(item: "Documents/x", holderPID: 42, seconds: 1.5),
        "could not lock 'Documents/x' within 1.5 s: process 42 holds it (stopped or hung?); stop that process or "
          + "raise FileCoordinator.lockTimeout"
      ),
      (
        FileCoordinatorError.container(.invalidPath("../x", rule: "no '..'")),
        "path '../x' is invalid: no '..'"
      ),
      (OpenURLError.noAnswer("timer://x"), "the app handling 'timer://x' did not answer"),
      (
        OpenURLError.unknownScheme("timer"),
        "no app handles 'timer:' URLs in this container: register one with registerURLScheme(_:launching:)"
      ),
      (
        FileHandOverError.notOpened("Documents/Inbox/a.txt"),
        "the receiving app did not open 'Documents/Inbox/a.txt' (the copy stays in its Inbox)"
      ),
      (SharedDefaultsError.valueTooLarge("big", 1_048_576), "value for key 'big' is larger than 1048576 bytes"),
      (
        SharedDefaultsError.container(.noContainerRoot("HOME is not set")),
        "cannot find the group container root: HOME is not set"
      ),
      (
        ImageCacheError.tooLarge(bytes: 10, limit: 5),
        "image of 10 bytes is larger than the cache's limit of 5 bytes"
      ),
      (DownloadError.httpStatus(404), "the server answered HTTP 404: nothing was saved"),
      (DownloadError.cancelled, "the download was cancelled"),
      (
        ActivityError.denied(group: "group.a"),
        "Live Activities are turned off for group 'group.a': the user turns them on with "
          + "`groupctl activities enable group.a` (Settings on iOS)"
      ),
      (
        IntentError.hostDied("Start", scheme: "timer"),
        "the app for 'timer:' died before answering intent 'Start', also when started again"
      ),
    ]
    for (error, message) in cases {
      #expect(error.description == message)
      #expect("\(error)" == message)
    }
  }
}
