@_exported import AppIntents
@_exported import AppLaunching
@_exported import BackgroundDownloads
// The umbrella module: `import GroupContainer` gives the container, the coordinator and presenters, and (as they
// land) shared defaults, the image cache, background downloads, widget timelines and live activities.
@_exported import FileCoordination
@_exported import GroupContainerCore
@_exported import ImageCache
@_exported import LiveActivities
@_exported import MemoryWarnings
@_exported import Messaging
@_exported import PropertyList
@_exported import SharedDefaults
@_exported import WidgetKit
