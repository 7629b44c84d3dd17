// What the tests ask `gc-test-helper` ("the other process") to do: one Codable enum shared by the tests
// (TestSupport's `Child(_:root:group:)`) and the helper, so a wrong or missing argument fails to compile.
// On the command line an invocation is ONE argument, its JSON (`HelperInvocation.arguments`); the library may append
// more (`open(_:)` appends the URL to a registered app's arguments): the helper keeps them in `appended`.
import Foundation

/// One run of the helper: the container (root and group id, which every command works in) and the command.
public struct HelperInvocation: Codable, Sendable, Equatable {
  /// The container root directory (`GroupContainer(identifier: group, root: root)`).
  public var root: String
  /// The group identifier.
  public var group: String
  public var command: HelperCommand
  /// Arguments after the JSON one, not part of the JSON: what the library appended when it started the helper
  /// (a URL-scheme handler launched by `open(_:)` gets the URL last).
  public var appended: [String] = []

  private enum CodingKeys: String, CodingKey { case root, group, command }

  public init(root: String, group: String, command: HelperCommand) {
    self.root = root
    self.group = group
    self.command = command
  }

  /// The helper's command line after the executable: the invocation's JSON, then `appended`.
  public var arguments: [String] {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    // Encoding strings, numbers, booleans and nested enums cannot fail.
    let json = try! encoder.encode(self)
    return [String(decoding: json, as: UTF8.self)] + appended
  }

  /// Decodes the helper's command line after the executable (`CommandLine.arguments.dropFirst()`): the first
  /// element is the JSON, the rest becomes `appended`. Throws a `DecodeFailure` that says what is wrong.
  public init(arguments: [String]) throws {
    guard let json = arguments.first else {
      throw DecodeFailure("no arguments: expected one argument, the JSON of a HelperInvocation")
    }
    do {
      self = try JSONDecoder().decode(HelperInvocation.self, from: Data(json.utf8))
    } catch let error as DecodingError {
      throw DecodeFailure(
        "argument 1 is not a HelperInvocation: \(Self.describe(error))\(Self.unknownCase(json)); argument 1: \(json)")
    } catch {
      throw DecodeFailure("argument 1 is not a HelperInvocation: \(error); argument 1: \(json)")
    }
    appended = Array(arguments.dropFirst())
  }

  /// Why the command line is not an invocation.
  public struct DecodeFailure: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
  }

  /// The synthesized decoding says only "Invalid number of keys found" for a command whose name is not a case:
  /// name it.
  private static func unknownCase(_ json: String) -> String {
    guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
      let command = object["command"] as? [String: Any]
    else { return "" }
    guard command.count == 1, let name = command.keys.first else {
      return " (a command is an object with one key, its case name; found keys \(command.keys.sorted()))"
    }
    guard let probe = try? JSONSerialization.data(withJSONObject: [name: [String: Any]()]) else { return "" }
    do {
      _ = try JSONDecoder().decode(HelperCommand.self, from: probe)
    } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
      return " ('\(name)' is not a case of HelperCommand)"
    } catch {}
    return ""
  }

  private static func describe(_ error: DecodingError) -> String {
    func path(_ context: DecodingError.Context) -> String {
      let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
      return keys.isEmpty ? "the top level" : keys.joined(separator: ".")
    }
    switch error {
    case .typeMismatch(let type, let context):
      return "at \(path(context)): expected \(type): \(context.debugDescription)"
    case .valueNotFound(let type, let context):
      return "at \(path(context)): no \(type) value: \(context.debugDescription)"
    case .keyNotFound(let key, let context):
      return "at \(path(context)): missing key '\(key.stringValue)': \(context.debugDescription)"
    case .dataCorrupted(let context):
      return "at \(path(context)): \(context.debugDescription)"
    @unknown default:
      return "\(error)"
    }
  }
}

/// The helper's commands. Each runs in the invocation's container; "prints" means one line on stdout (the tests
/// wait for these lines). Optional values and defaults stand for optional trailing arguments.
public enum HelperCommand: Codable, Sendable, Equatable {
  // MARK: Coordination (main.swift)

  /// `count` coordinated accesses of `item` in `mode`, each holding for `holdMS` ms; appends
  /// "B <pid> <mode> <ns>" / "E <pid> <mode> <ns>" (CLOCK_MONOTONIC) around each accessor to the shared `log`, then
  /// prints "done".
  case access(mode: AccessMode, item: String, count: Int, holdMS: UInt64, log: String)
  /// Takes the access (`read`, `write`, `delete`…) of `item`, prints "locked", then waits to be killed.
  case hold(mode: AccessMode, item: String)
  /// A coordinated write+write of both items in the given order (first, second), `count` times; prints
  /// "done <count>".
  case pair(first: String, second: String, count: Int)
  /// A presenter of `item` printing "<event> <coordinated|uncoordinated> <pid|-> [resync] [detail]" per callback;
  /// prints "ready <pid>" first. It answers relinquish calls after `answerDelay` seconds. With `stallMS` its watcher
  /// thread reads no events for that long (so the kernel queue overflows), or until the file `<root>/resume-watcher`
  /// appears. An item named `failsave…` refuses to save. With GC_TEST_REPORT_QUIETS set, "relinquishToWriter"
  /// lines add "quiets=<n>". Each time the file `<root>/drain-<pid>` appears it removes it and prints "drained" once
  /// every event and message queued for it before then was handled and its callbacks ran.
  case present(item: String, answerDelay: Double = 0, stallMS: UInt64 = 0)
  /// Handles `scheme` URLs, answering true unless the URL's host is "refuse"; prints "ready <pid>" (with
  /// " launched-with <url>" when `open(_:)` started it: the URL it appended), then "opened <url>" per URL.
  case urlHandler(scheme: String)

  // MARK: Shared defaults (main.swift, DefaultsScript.swift, InvariantHelpers.swift, PersistentDomainHelper.swift)

  /// Sets k<i> = data of `valueBytes` bytes (byte i % 256) for i in 0..<count, printing "ack <i>" once each set
  /// returned — everything acked must survive a kill -9; then "done".
  case defaultsSet(suite: String, count: Int, valueBytes: Int)
  /// Prints one line per key, "<key> <integer value or data length>", then "end".
  case defaultsKeys(suite: String)
  /// Holds the suite's lock forever, inside an update; prints "holding".
  case defaultsHold(suite: String)
  /// Prints "ready <pid>", then "change <key> <old> <new> <origin pid|->" per change.
  case defaultsObserve(suite: String)
  /// Runs `steps` in order on one suite, so a test can keep a process alive with a known state and make it act
  /// later (see `DefaultsStep`; `wait` steps look for their files in the root). Exits 0 after the last.
  case defaultsScript(suite: String, steps: [DefaultsStep])
  /// Sets `w<writer>-k<i % 8>` to self-checking values with rising sequence numbers, sizes varying around `size`
  /// so records straddle pages, `count` times. Prints "done".
  case seqWriter(suite: String, writer: Int, count: Int, size: Int)
  /// Until `<root>/stop` exists, reads every key of `writers` writers (plain gets) and follows every change (an
  /// observer), checking each value and that no key's sequence goes back. Prints "ready", then
  /// "checked <n> bad <m> torn <t> [first problems]".
  case seqReader(suite: String, writers: Int)
  /// Reads the whole suite in a loop until the file `<root>/stop` exists. Each domain the test writes tags
  /// every value with its name ("A": 250 keys, "B": 150 keys); a read that shows values of both, or a key count
  /// that is neither, is a mix. Prints "ready", then at the end "seen A=<n> B=<n> empty=<n> mixed=<n>".
  case domainReader(suite: String)

  // MARK: Presenter semantics and environment (PresenterModes.swift, Descriptors.swift)

  /// Prints "root <GroupContainer.defaultRoot()>" or "error <description>" (the invocation's root is not used).
  case defaultRoot
  /// Run with GROUP_CONTAINER_SIMULATE_NO_INOTIFY=1: `count` coordinated increments of the integer in `item` (a
  /// presenter that does not ack within 20 s fails them), then tries to add a presenter. Prints
  /// "incremented <count>", then "presenter-error <description>" or "presenter-added".
  case noInotify(item: String, count: Int)
  /// Prints "fd <n> <target>" for each open descriptor (the target of /proc/self/fd/<n>, e.g. `pipe:[1234]`),
  /// then "done"; with `stay`, waits until killed (or until its parent is gone, like every helper), else exits.
  case descriptors(stay: Bool)

  // MARK: Path attacks (PathAttacks.swift)

  /// Swaps the container-relative names `a` and `b` with `renameat2(RENAME_EXCHANGE)` in a tight loop; prints
  /// "swapping" once started. Never returns.
  case swap(a: String, b: String)
  /// Puts a symlink to `target` in the place of `item`, then a plain file, each renamed over whatever is there,
  /// every ~20 µs (the writes under test replace either); prints "relinking" once started. Never returns.
  case relink(item: String, target: String)
  /// Swaps `a` and `b` once (`renameat2(RENAME_EXCHANGE)`), prints "exchanged" and exits.
  case exchange(a: String, b: String)
  /// Renames a symlink to `target` over `item` once, prints "planted" and exits.
  case plantLink(item: String, target: String)
  /// Moves `directory` aside and makes it again with an empty directory `deeper` in it, prints "remade" and exits.
  case remake(directory: String)
  /// Starts a replace of `item` and stops after creating its temp file (next to the item, or with `staged` in the
  /// container's staging directory, as replaces do), as a writer that dies there would; prints
  /// "created <temp name>", then waits to be killed.
  case pauseWrite(item: String, staged: Bool = false)

  // MARK: Atomic publish (ScaleModes.swift)

  /// Coordinated `.forReplacing` writes of a self-checking document of `bytes` bytes, generation 1, 2, …, through
  /// `container.write`; prints "wrote <g>" after each, "done <g>" once `<root>/stop` exists.
  case tornWriter(item: String, bytes: Int)
  /// Reads the document again and again (in a coordinated read, or plainly as a tool that does not coordinate)
  /// and checks each read. Prints "seen <k>" when it has seen k distinct generations, and once `<root>/stop`
  /// exists "reads <n> torn <t> seen <k>[ first: <what>]".
  case tornReader(item: String, coordinated: Bool)

  // MARK: Lock caching (LockCaching.swift)

  /// One coordinated write of `item` with tree locks lingering `lingerMS` ms, then prints "accessed cached=<dirs>"
  /// (the directories whose tree locks it keeps cached, comma-separated, the root as "."), "cached=<dirs>" at each
  /// change, and "dropped" once none is left (revoked or lingered out); then waits to be killed.
  case cacheIdle(item: String, lingerMS: UInt64)
  /// A coordinated write of `item`, then another that prints "locked" and holds until `goFile` exists, then
  /// "released <monotonic ns> cached=<dirs>", then as `cacheIdle`.
  case cacheHold(item: String, lingerMS: UInt64, goFile: String)

  // MARK: Lock file sweeps (LockFileSweeps.swift)

  /// `count` coordinated writes of `item`, each reading the decimal number in it (none: 0) and writing it plus one
  /// in place (no atomic replace: only the lock keeps two writers apart); after every other write it closes its
  /// idle lock files, so its next write opens the lock file by name again. Prints "done".
  case lockCounter(item: String, count: Int)
  /// Coordinated writes of `<prefix>-0` … `<prefix>-<items − 1>` (one new lock file each), with a lock file sweep
  /// due every `threshold` lock files made in the container; prints "done", then waits to be killed (its sweep
  /// threads finish meanwhile).
  case lockChurn(prefix: String, items: Int, threshold: UInt64)
  /// One sweep of the container's lock files, open ones included, armed to die (GROUPCONTAINER_FAULT_POINT=locks.sweepRemoved) after
  /// its first removal; prints "swept <n>" if it lives.
  case lockSweep

  // MARK: Memory pressure (MemoryPressure.swift)

  /// Prints "started <signal>" once its monitor watches its first cgroup, waits until the test moved it into the
  /// memory cgroup named `cgroup` and the monitor followed ("moved"; "not followed" and exit 1 after 10 s), writes
  /// and syncs `fileCacheMB` of files (page cache the kernel can reclaim, which is what its pressure events
  /// measure), then grows a registered tier (512 KB every 20 ms, to within 4 MB of the limit) until the critical
  /// delivery. Prints "signal <signal>" per signal and "limit <bytes>", then "handler <level> released <bytes>
  /// resident <bytes>" per handler call and "report <level> <source> released <bytes>" per delivery, then
  /// "resident before=<bytes> after=<bytes>" around the critical release, then "normal" once the level fell back.
  case pressureCgroup(cgroup: String, fileCacheMB: Int)
  /// Sets a budget of `budgetMB` MB and grows until the first delivery; prints "footprint at start <bytes> budget
  /// <bytes>", then "handler <level> <source> footprint <bytes> budget <bytes>" and exits.
  case pressureBudget(budgetMB: Int)
  /// Registers a handler named `name` with the container; prints "ready", then "got <level>" per handler call and
  /// "report <level> <source>" per delivery; runs until killed.
  case pressureListen(name: String)
  /// Sets `key` in `suite` and stays idle; prints "ready", then for each delivery
  /// "report <level> <source> <handler>=<bytes>,… value <length of the key's value, read again>"; runs until killed.
  case pressureDefaults(suite: String)
  /// Registers a low-disk-space handler for the container-relative `cacheDirectory` that removes its files (oldest
  /// name first) until the space recovered; prints "ready", then "low <available> <size> removed <bytes>"; runs
  /// until killed.
  case pressureDisk(cacheDirectory: String)

  // MARK: Live Activities (LiveActivitiesModes.swift; times from GROUPCONTAINER_ACTIVITY_CLOCK_FILE when set)

  /// The app: requests `count` scoreboard activities, prints "id <id>" for each.
  case actRequest(homeTeam: String, awayTeam: String, count: Int = 1)
  /// The widget: prints "ready <state>", then a "content <home> <away> <home likes> <away likes> <final> <ns>"
  /// line per new content and a "state <state>" line per new state, until the activity is dismissed ("done").
  case actObserve(id: String)
  /// Prints "ready", then "new <id> <home> <away>" per activity started later.
  case actObserveNew
  /// One update of the scores; prints "updated".
  case actUpdate(id: String, homeScore: Int, awayScore: Int)
  /// Updates the home score to 1, 2, 3, … and prints "updated <n>" once each update returned, until killed.
  case actUpdateLoop(id: String)
  /// Prints "ready", then `count` atomic read-modify-writes adding a like to `side`; prints "done".
  case actLike(id: String, count: Int, side: Side)
  /// The user's swipe in the widget; prints "dismissed".
  case actDismiss(id: String)
  /// Prints "state <state>" by this process's clock (read through the store: a dismissed activity is not among
  /// `activities(in:)`).
  case actState(id: String)

  // MARK: Background downloads (DownloadSessions.swift)

  /// Starts a download of `url` in session `session` (to the container-relative `destination`, or the default
  /// place), prints "task <id>", and stays until killed. With `relaunchLog`, registers this helper as the app the
  /// agent relaunches for the session's events (`dlRelaunched(log:)`, in the same container).
  case dlStart(session: String, url: URL, destination: String? = nil, relaunchLog: String? = nil)
  /// Attaches, prints "attached", then each queued event ("event <kind> <task id> <event id|-> <error|->",
  /// "event didFinishEvents - - -") and acknowledges it; exits after `count` queued events (0: after the backlog's
  /// didFinishEvents). With `download`, starts a download of it once attached ("task <id>"), and prints
  /// "event-files <n>" after the first `finished` event: the event files queued for the session as it was handed out.
  case dlAttach(session: String, count: Int, download: URL? = nil)
  /// Started by the agent (GROUPCONTAINER_BACKGROUND_SESSION): attaches to the session it names and appends
  /// "relaunched <session> <pid> tunables <GLIBC_TUNABLES, or ->" and its events to `log` until didFinishEvents (its stdout reaches no test).
  case dlRelaunched(log: String)
  /// Run with GROUPCONTAINER_PAUSE_POINT=agents.launch (pause files in GROUPCONTAINER_PAUSE_DIR): a thread starts the
  /// container's agent and is held between its decision and its spawn; once it is, prints "paused", asks for the
  /// agent from the main thread too, prints "second returned" when that call returns, and exits 0.
  case dlLaunchRace

  // MARK: Image cache (ImageCacheModes.swift; each on the shared image cache named `cache`)

  /// Random stores (70 %) and removals of k0…k<keys-1>, `operations` of them, seeded by `writer`; writes
  /// "S|R <key> <version> <start-ns> <end-ns>" per op to `log` (CLOCK_MONOTONIC, one clock for every process),
  /// then prints "done".
  case cacheWriter(cache: String, writer: Int, operations: Int, keys: Int, log: String)
  /// Prints "reading", reads random keys for `milliseconds` ms; writes "G <key> <version|0 for a miss|bad>
  /// <start-ns> <end-ns>" per read to `log`, then prints "done memoryHits=<n> diskHits=<n> misses=<n>".
  case cacheReader(cache: String, milliseconds: UInt64, keys: Int, log: String)
  /// Stores new versions of k0…k<keys-1> (images of `width`×`height`) until killed; prints "stored <n>" after each.
  case cacheStoreLoop(cache: String, keys: Int, width: Int, height: Int)
  /// Reads `key` every 5 ms and prints "now <version|nil|other>" at each change.
  case cacheWatch(cache: String, key: String)
  /// Prints "reading", reads every key k0…k<keys-1> in turn for `milliseconds` ms; prints "bad <key>" for an
  /// image that is not whole, "error <description>" for a thrown error, then "done <reads>".
  case cacheReadAll(cache: String, keys: Int, milliseconds: UInt64)
  /// Fills its memory tier with `images` 100 kB images (limit: 16 MB), prints "filled <cost> <limit>", then
  /// "cost <n>" at each change of the tier's cost (memory warnings sent to the group trim it); runs until killed.
  case cacheMemory(cache: String, images: Int)
  /// Once moved into the memory cgroup named `cgroup`, writes 24 MB of file cache, then fills the memory tier
  /// (cost limit: the cgroup's limit) with 512 kB images every 20 ms (to within 4 MB of the limit) until the
  /// low-memory policy delivered critical. Prints "limit <bytes>", "report <level> <source> cache-released <bytes>
  /// cost <bytes after>" per delivery, then "resident before=<peak while growing> after=<bytes>" and exits.
  case cacheCgroup(cache: String, cgroup: String)
  /// A process with a memory budget of `budgetMB` MB (a widget's) and a cache with the default limits is offered
  /// `offeredMB` distinct 1 MB images (stored, then read back); prints "peak=<footprint> budget=<bytes>
  /// tier=<memory tier cost limit>" at the end.
  case cacheBudget(cache: String, budgetMB: Int, offeredMB: Int)
  /// Holds the cache open (its low-disk-space handler registered), prints "ready", then "entries <n>" at each
  /// change of the number of entries on disk; runs until killed.
  case cacheDisk(cache: String)
  /// Run with GROUPCONTAINER_PAUSE_POINT=imagecache.trim.scanned (pause files in `pauseDirectory`): stores 10 KB
  /// images past a 50,000-byte disk limit until the background trim they start stops after its scan; stores ten
  /// more meanwhile — with `replace`, stores k0 and k1 again instead; lets it go; prints "usage <bytes>" once the
  /// disk is back under the limit, or after 10 s.
  case cacheTrimRace(cache: String, pauseDirectory: String, replace: Bool = false)

  // MARK: App intents and hand-over (IntentModes.swift)

  /// Performs the helper's intents (Echo, Append, Fail, Hang, Crash) for `scheme`; prints "ready <pid>".
  case intentHost(scheme: String)
  /// Handles `scheme` (and handed-over file) URLs; appends "opened <path> <contents>" to `log` for each (launched
  /// receivers' output reaches no test); prints "ready <pid>".
  case inboxReceiver(scheme: String, log: String)

  // MARK: Widgets (WidgetModes.swift)

  /// A timeline widget of `kind` whose provider makes `entries` entries `spacingMS` ms apart with `policy`; prints
  /// "entry <call> <index> <headline> <late-ms>" for each entry it shows, until killed.
  case widgetTimeline(kind: String, policy: ReloadPolicy, entries: Int = 1, spacingMS: Int = 0)
  /// A Today widget of `kind` refreshed every `refreshMS` ms; prints "update newData <headline>", "update noData"
  /// or "update failed" for each update, until killed.
  case todayWidget(kind: String, refreshMS: Int64, updateTimeoutMS: Int64 = 30_000)

  // MARK: The watcher's backend (WatcherModes.swift)

  /// Raises the soft descriptor limit if needed, opens copies of /dev/null until descriptors 0 to `open` - 1 are all
  /// in use, closes `freeSlot` if given, and prints "descriptors <n> lowest free <fd>"; then starts the watcher.
  /// Prints "unavailable <reason>" and exits 0 when it is refused; else watches `directory`, prints "watching", and
  /// "heard created" once a file named "created" appears there (exits 1 after 60 s without).
  case watchAfterDescriptors(directory: String, open: Int, freeSlot: Int?)
  /// Watches `directory`, prints "watching", stops the watcher and prints "stopped" once its thread has ended, then
  /// "refused after stop" (or "watched after stop") for another watch; exits 0.
  case watchThenStop(directory: String)
  /// Renames `count` new files, one after the other, to `<directory>/<name>` (made in a directory beside it, which
  /// nobody watches), printing "renamed <i>" after each; with `acknowledgements`, waits before the next until the
  /// file `<acknowledgements>/<i>` exists (prints "no acknowledgement of <i>" and exits 1 after 60 s). Prints "done".
  case renameInto(directory: String, name: String, count: Int, acknowledgements: String?)
  /// Watches `directory` for renames into it, prints "watching", and for each `IN_MOVED_TO` of `name` makes the file
  /// `<acknowledgements>/<n>` (n = 0, 1, ...); prints "consumed <count>" and exits 0 after `count` of them. A process
  /// of its own: the test process's watcher is shared with tests that stall it or flood its queue (an overflow there
  /// drops events for good).
  case consumeRenames(directory: String, name: String, count: Int, acknowledgements: String)
  /// A busy loop for `seconds` (load for a test's other processes); exits 0.
  case spin(seconds: Double)

  // MARK: I/O-error injection (IOFaultModes.swift)

  /// One round of an I/O-error loop: opens what `operation` works on and prints "seen <state>" (what this fresh
  /// process reads: the test checks nothing acknowledged was lost and nothing is torn); arms `IOFaultInjection` to
  /// fail the `nth` call of kind `call` (nil: count only) with `errno`, runs the operation once for `round`, disarms,
  /// and prints "result ok <acknowledged>" or "result error <description>", "injected <n>" and
  /// "calls <kind>=<n>,…"; then runs it again unarmed for `round` + 100000 and prints "next ok <acknowledged>" or
  /// "next error <description>", and exits 0.
  case ioFault(operation: IOFaultOperation, call: String?, nth: Int, errno: Int32, round: Int)

  /// The operations the I/O-error loops run (`ioFault`).
  public enum IOFaultOperation: String, Codable, Sendable, CaseIterable {
    case defaultsSet, defaultsUpdate, defaultsSynchronize, defaultsCompaction
    case coordinatedWrite, coordinatedMove
    case cacheStore, cacheTrim
    case inboxSend, activityUpdate
    /// A download run to its end by the agent (in the helper's process) with a checkpoint every 32 KiB of its
    /// body, from the gc-file-server whose base URL is in `<root>/server-url`.
    case downloadCheckpoint
    /// The agent's coordinated publish of a finished partial into the container (`Publisher.publish`).
    case downloadPublish
  }

  // MARK: System calls per operation (SyscallCountModes.swift)

  /// Opens what `operation` works on and runs it a few times unarmed (first-use costs: lock files opened, journals
  /// created, lock words cached), then `count` times with `IOFaultInjection` counting (every thread of this
  /// process: background work too) and prints "calls <kind>=<n>,…" (the totals of the `count` operations) and
  /// "count <count>"; exits 0. `server`: the file server's base URL (the `download` operation).
  case syscallCounts(operation: SyscallOperation, count: Int, server: String? = nil)

  /// The operations whose system calls per operation are thresholds (`syscallCounts`;
  /// Benchmarks/Thresholds/syscalls.json).
  public enum SyscallOperation: String, Codable, Sendable, CaseIterable {
    case defaultsSet, defaultsUpdate, defaultsSynchronize
    case coordinatedRead, coordinatedWrite, coordinatedReplace, coordinatedReplacePresented, coordinatedMove
    case cacheStore, cacheDiskHit
    case activityUpdate, inboxSend, download
  }

  /// How `access` and `hold` coordinate: a read, or a write with its options.
  public enum AccessMode: String, Codable, Sendable, CaseIterable {
    case read, write, delete, replace, merge
  }

  /// Which team a like goes to.
  public enum Side: String, Codable, Sendable {
    case home, away
  }

  /// A timeline's reload policy (`TimelineReloadPolicy`); `afterMS` counts from the last entry's date.
  public enum ReloadPolicy: Codable, Sendable, Equatable {
    case atEnd, never
    case afterMS(Int)
  }
}

/// One step of `HelperCommand.defaultsScript`.
public enum DefaultsStep: Codable, Sendable, Equatable {
  /// Sets `key` to the integer `value`; prints "ack <key>" once the set returned.
  case set(_ key: String, _ value: Int)
  /// Sets `key` to `value` on a thread of its own and goes on once a thread of this process sleeps on the suite's
  /// lock (another process holds it).
  case backgroundSet(_ key: String, _ value: Int)
  /// Removes `key`.
  case remove(_ key: String)
  /// Sets `<prefix><i>` for i in 0..<count to `bytes` bytes of data (`bytes` 0: the integer i); prints
  /// "filled <prefix> <count>".
  case fill(_ prefix: String, count: Int, bytes: Int)
  /// As `fill`, `batch` keys per commit (`set(values:)`): a large suite written in a fraction of the time.
  case fillInBatches(_ prefix: String, count: Int, bytes: Int, batch: Int)
  /// As `fill`, printing "ack <key>" after each set.
  case fillAcked(_ prefix: String, count: Int, bytes: Int)
  /// Sets them all to one value of `bytes` bytes; prints "filled <prefix> <count>".
  case fillSame(_ prefix: String, count: Int, bytes: Int)
  /// `synchronize()`; prints "synced".
  case sync
  /// A synchronize whose compaction also empties the journal (a new generation); prints "rewound".
  case rewind
  /// Prints `text`.
  case say(_ text: String)
  /// Waits until the file `<root>/<name>` exists (no limit of its own: the test's wait for the process is one).
  case wait(_ name: String)
  /// Waits for what this process does in the background (a compaction, an edit of a replaced export); prints
  /// "settled".
  case settle
  /// Prints "loads <n>": the snapshots this process has read and parsed.
  case loads
  /// Prints "held <n>": the changes it holds over its image.
  case held
  /// Prints "compactions <n>": the background compactions it installed.
  case compactions
  /// Prints "unreadable <n>": lock-free reads that found committed bytes which were not records.
  case unreadable
  /// Prints one line per key, "<key> <integer value or data length>", then "end".
  case dump
  /// Prints "count <n>": the number of keys with `prefix`.
  case count(_ prefix: String)
  /// Prints "read <key> <integer value, or nil>": one point read (`value(forKey:)`).
  case read(_ key: String)
  /// Prints "scans <n>": the scans of a lazy tail this process made (DefaultsStore+LazyTail.swift).
  case tailScans
  /// Prints "handed over <n>": the catch-ups this process handed to the background (DefaultsStore+LazyTail.swift).
  case handOvers
}
