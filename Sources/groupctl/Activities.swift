import ArgumentParser
import Foundation
import GroupContainer
import LiveActivities
import Logging

/// `groupctl activities …`: the group's Live Activities from the shell — list and follow them, end them (the user's
/// dismissal), and the user's switch (Settings on iOS).
///
/// Exit status: 0 success, 1 a failure (the reason on stderr), 2 no such activity, 64 a malformed argument.
struct Activities: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "activities",
    abstract: "List, follow and end the group's Live Activities; turn them on or off.",
    discussion: """
      Records live in the container's private defaults suite <group-id>.liveactivities (one key per activity; \
      the user's switch in .coordination/activities/). States are computed with the activities' clock \
      (GROUPCONTAINER_ACTIVITY_CLOCK_FILE when set, else the system's): an activity ends 8 hours after its start \
      and is dismissed at the latest 4 hours after its end. A damaged record is reported on stderr and skipped.
      """,
    subcommands: [
      ActivitiesList.self, ActivitiesWatch.self, ActivitiesEnd.self, ActivitiesEnable.self, ActivitiesDisable.self,
    ])
}

/// What the activities commands share: logging on stderr, the JSON line of an activity.
enum ActivitiesCLI {
  /// Library logs (e.g. a damaged record) go to stderr, never into the JSON lines on stdout.
  static func logToStandardError() {
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = .info
      return handler
    }
  }

  /// ISO 8601 in UTC, as `ISO8601DateFormatter` writes it — without making one per date (307 µs each here, twice
  /// per line: most of what `watch` spent per update).
  static func date(_ seconds: Double?) -> String? {
    seconds.map {
      PropertyListDate(secondsSince1970: $0).iso8601
        ?? ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: $0))
    }
  }

  /// One line of `list --json` and `watch`: keys sorted; `content_state` is the state's own JSON; absent values
  /// are left out. A removed record is `{"id":…,"state":"dismissed"}`. Written in the keys' order, in one string
  /// (a table of fields sorted and joined was most of what `watch` spent on a line).
  static func json(_ snapshot: ActivitySnapshot) -> String {
    var text = "{"
    text.reserveCapacity(512)
    func field(_ key: String, _ value: String?) {
      guard let value else { return }
      if text.utf8.count > 1 { text += "," }
      text += "\"" + key + "\":" + value
    }
    let r = snapshot.record
    func string(_ value: String?) -> String? { value.map { JSONScalar.string($0).encoded } }
    field("attributes", r?.attributes.text)
    field("attributes_type", string(r?.attributesType))
    field("content_state", r?.contentState.text)
    field("dismissal_date", string(date(r?.dismissalDate)))
    field("end_date", string(date(r?.endDate)))
    field("id", string(snapshot.id))
    field("relevance_score", r.map { JSONScalar.double($0.relevanceScore).encoded })
    field("revision", r.map { JSONScalar.int(Int($0.revision)).encoded })
    field("stale_date", string(date(r?.staleDate)))
    field("start_date", string(date(r?.startDate)))
    field("state", string(snapshot.state.rawValue))
    field("writer_pid", r.map { JSONScalar.int(Int($0.writerPID)).encoded })
    return text + "}"
  }
}

/// An activity id argument, checked before anything is opened.
struct ActivityIDArgument: ParsableArguments {
  @Argument(help: "The activity id (an upper-case UUID, as list prints it).") var activityID: String

  func validate() throws {
    guard ActivityRecordFormat.isActivityID(activityID) else {
      throw ValidationError("'\(activityID)' is not an activity id: ids are upper-case UUIDs, as list prints them")
    }
  }
}

struct ActivitiesList: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "list", abstract: "The group's activities, oldest first (dismissed ones included until removed).",
    discussion: "A container that does not exist is an error (exit status 1); list never creates one.")
  @OptionGroup var container: ContainerOptions
  @Flag(help: "One JSON object per line: id, attributes_type, state, content_state, stale_date, …") var json = false

  func run() throws {
    ActivitiesCLI.logToStandardError()
    let store = try ActivityStore(container: try container.openExisting())
    let now = store.now
    for record in store.records() {
      let state = ActivityRules.effective(record, now: now).state
      if json {
        Output.line(ActivitiesCLI.json(ActivitySnapshot(id: record.id, record: record, state: state)))
      } else {
        let stale = ActivitiesCLI.date(record.staleDate).map { " stale at \($0)" } ?? ""
        Output.line(
          "\(record.id)  \(record.attributesType)  \(state.rawValue)  \(record.contentState.text)\(stale)")
      }
    }
  }
}

struct ActivitiesWatch: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "watch", abstract: "Follow the group's activities until interrupted: one JSON line per change.",
    discussion: """
      First every activity as it is, then one line (the fields of list --json) at every update, end, dismissal, \
      staleness or removal, from any process.
      """)
  @OptionGroup var container: ContainerOptions

  func run() async throws {
    ActivitiesCLI.logToStandardError()
    let store = try ActivityStore(container: try container.openExisting())
    for await snapshot in try ActivityWatch.snapshots(store: store, includeExisting: true) {
      Output.line(ActivitiesCLI.json(snapshot))
    }
  }
}

struct ActivitiesEnd: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "end", abstract: "End an activity (visible up to 4 hours more), or dismiss it now (--immediate).",
    discussion: "Exit status 2 when the container holds no such activity.")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var id: ActivityIDArgument
  @Flag(help: "Dismiss it now, as the user's swipe does.") var immediate = false

  func run() throws {
    ActivitiesCLI.logToStandardError()
    let store = try ActivityStore(container: try container.openExisting())
    let now = store.now
    let policy: ActivityUIDismissalPolicy = immediate ? .immediate : .default
    let record = try store.modify(id.activityID) { (record, effective) throws(ActivityError) in
      guard effective.state != .dismissed else { return false }
      ActivityRules.end(&record, policy: policy, now: now)
      return true
    }
    guard let record else {
      throw DownloadsCLI.fail(ActivityError.unknownActivity(id.activityID).description, status: 2)
    }
    Output.line("\(record.id) \(ActivityRules.effective(record, now: store.now).state.rawValue)")
  }
}

struct ActivitiesEnable: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "enable", abstract: "Allow the group's apps to start Live Activities (the default).")
  @OptionGroup var container: ContainerOptions

  func run() throws {
    ActivitiesCLI.logToStandardError()
    try ActivityStore(container: try container.open()).setActivitiesEnabled(true)
  }
}

struct ActivitiesDisable: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "disable",
    abstract: "Refuse new Live Activities for the group (requests fail); running ones go on until they end.")
  @OptionGroup var container: ContainerOptions

  func run() throws {
    ActivitiesCLI.logToStandardError()
    try ActivityStore(container: try container.open()).setActivitiesEnabled(false)
  }
}
