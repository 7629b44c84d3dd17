import ArgumentParser
import Foundation
import GroupContainer

/// `groupctl cache pressure <level> <group-id>`: the simulator's "Simulate Memory Warning", for every process of
/// the group.
struct CachePressure: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "pressure",
    abstract: "Send a memory pressure level to every process that uses the group's container.",
    discussion: """
      Each process that joined the group (an image cache, shared defaults, or MemoryPressure.join) delivers the \
      level as if it came from the kernel: on warning its memory tiers trim to half their limit, on critical they \
      empty, and every registered handler runs. normal returns them to what their own signals say.
      """)

  @Argument(help: "normal, warning or critical.") var level: String
  @OptionGroup var container: ContainerOptions

  func run() throws {
    guard let parsed = MemoryPressureLevel(name: level) else {
      throw ValidationError("'\(level)' is not a level: use normal, warning or critical")
    }
    try MemoryPressure.send(parsed, to: try container.open())
    Output.line("sent \(parsed) to \(container.groupID)")
  }
}
