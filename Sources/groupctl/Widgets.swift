import ArgumentParser
import Foundation
import GroupContainer

struct Widgets: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "widgets",
    abstract: "Ask the group's widgets for new timelines, as an app does with WidgetCenter.",
    subcommands: [Reload.self])

  struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
      commandName: "reload",
      abstract: "Make the widgets of a kind (default: every kind) reload their timelines now, in every process.",
      discussion: "The same request as WidgetCenter.reloadTimelines(ofKind:) or reloadAllTimelines().")

    @OptionGroup var container: ContainerOptions
    @Option(help: "The widget kind, e.g. video; without it every kind reloads.") var kind: String?

    func run() throws {
      try WidgetCenter(container: container.open()).requestReload(ofKind: kind)
    }
  }
}
