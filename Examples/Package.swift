// swift-tools-version: 6.1
// The demo apps, their kits and the README's programs: a package of their own that depends on the root by path (as
// Benchmarks/ does), so none of their target names (`host`, `widget`, …) lands in the graph of a package that depends
// on GroupContainer, and a `swift build` of the root needs neither libpng nor libjpeg. Built by `make demo` and
// `make test` (`swift build --package-path Examples`); ExamplesTests in the root runs what it builds.
import PackageDescription

// A path dependency is named by its directory, not by its manifest's name: derive it from this package's parent.
let root = Context.packageDirectory.split(separator: "/").dropLast().last.map(String.init) ?? ""
let rootIdentity = root.lowercased()

let package = Package(
  name: "GroupContainerExamples",
  dependencies: [
    .package(path: ".."),
    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
  ],
  targets: [
    // The Timer app and its Today widget (`make demo`), sharing their logic through SimpleTimerKit.
    .target(
      name: "SimpleTimerKit",
      dependencies: [
        .product(name: "GroupContainer", package: rootIdentity), .product(name: "Logging", package: "swift-log"),
      ],
      path: "SimpleTimerKit"),
    // The scoreboard Live Activity the demo's host and widget share: attributes, state and its text views. The root
    // compiles the same directory as a target of its own tests (not a product: nothing of it reaches a dependent).
    .target(
      name: "ScoreboardKit",
      dependencies: [
        .product(name: "LiveActivities", package: rootIdentity), .product(name: "AppIntents", package: rootIdentity),
        .product(name: "FileCoordination", package: rootIdentity),
        .product(name: "GroupContainerCore", package: rootIdentity),
      ],
      path: "ScoreboardKit"),
    // The video widget (`host video`, `widget video`): libpng and libjpeg-turbo (Debian: libpng-dev,
    // libjpeg62-turbo-dev) decode its thumbnails; CThumbnailCodec is the C shim that catches their longjmp errors.
    .systemLibrary(
      name: "CImageLibraries", path: "CImageLibraries", pkgConfig: "libpng",
      providers: [.apt(["libpng-dev", "libjpeg62-turbo-dev"])]),
    // The module map's `link` lines reach only modules that import it (autolinking); the shim includes the headers
    // from C, so it names the libraries itself.
    .target(
      name: "CThumbnailCodec", dependencies: ["CImageLibraries"], path: "CThumbnailCodec",
      linkerSettings: [.linkedLibrary("png"), .linkedLibrary("jpeg")]),
    .target(
      name: "VideoWidgetKit",
      dependencies: [
        "CThumbnailCodec", "SimpleTimerKit", .product(name: "GroupContainer", package: rootIdentity),
        .product(name: "ImageCache", package: rootIdentity),
      ],
      path: "VideoWidgetKit"),
    .executableTarget(
      name: "host",
      dependencies: [
        "SimpleTimerKit", "VideoWidgetKit", "ScoreboardKit", .product(name: "GroupContainer", package: rootIdentity),
      ],
      path: "host"),
    .executableTarget(
      name: "widget",
      dependencies: [
        "SimpleTimerKit", "VideoWidgetKit", "ScoreboardKit", .product(name: "GroupContainer", package: rootIdentity),
      ],
      path: "widget"),
    // The classic iOS App Group snippet ported to Linux; Original.swift.txt is the iOS code it is diffed against.
    .executableTarget(
      name: "ported-widget", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "PortedWidget", exclude: ["Original.swift.txt"]),
    // The README's programs, one executable each: ReadmeTests checks that every ```swift block of README.md is one
    // of these files byte for byte, and runs them.
    .executableTarget(
      name: "getting-started", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Readme/GettingStarted"),
    // The DocC articles' programs (Sources/*/Documentation.docc), one executable each, checked the same way: every
    // ```swift block of an article is one of these files byte for byte (a tour's output is compared as the README's).
    .executableTarget(
      name: "tour-defaults", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/TourDefaults"),
    .executableTarget(
      name: "tour-files", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/TourFiles"),
    .executableTarget(
      name: "tour-images", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/TourImages"),
    .executableTarget(
      name: "tour-downloads", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/TourDownloads"),
    .executableTarget(
      name: "doc-app-intents", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/AppIntents"),
    .executableTarget(
      name: "doc-handing-over-files", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/HandingOverFiles"),
    .executableTarget(
      name: "doc-live-activities",
      dependencies: ["ScoreboardKit", .product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/LiveActivities"),
    .executableTarget(
      name: "doc-logging", dependencies: [.product(name: "Logging", package: "swift-log")],
      path: "Docs/Logging"),
    .executableTarget(
      name: "doc-logging-silenced", dependencies: [.product(name: "Logging", package: "swift-log")],
      path: "Docs/LoggingSilenced"),
    .executableTarget(
      name: "doc-memory-warnings", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/MemoryWarnings"),
    .executableTarget(
      name: "doc-property-list", dependencies: [.product(name: "PropertyList", package: rootIdentity)],
      path: "Docs/PropertyList"),
    .executableTarget(
      name: "doc-responding-to-memory-warnings",
      dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/RespondingToMemoryWarnings"),
    .executableTarget(
      name: "doc-relaunched-for-events", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/RelaunchedForEvents"),
    .executableTarget(
      name: "doc-widget-kit", dependencies: [.product(name: "GroupContainer", package: rootIdentity)],
      path: "Docs/WidgetKit"),
    // The libFuzzer harness of the thumbnail decoder: real only when built by Fuzz/run.sh (-DFUZZING). CFuzzShim is
    // the root's Fuzz/CFuzzShim (a symlink). VideoWidgetKit's Thumbnail.swift and TerminalArt.swift are compiled in
    // (symlinks), so the harness's ASan build (`make fuzz-check`) needs ImageCache, not the whole GroupContainer.
    .target(name: "CFuzzShim", path: "Fuzz/CFuzzShim"),
    .executableTarget(
      name: "ThumbnailDecodeFuzz",
      dependencies: ["CThumbnailCodec", "CFuzzShim", .product(name: "ImageCache", package: rootIdentity)],
      path: "Fuzz/ThumbnailDecodeFuzz"),
    // Real images for the thumbnail tests: the root's Tests/TestImageKit (a symlink).
    .target(name: "TestImageKit", path: "Tests/TestImageKit"),
    // The kits' own logic, in this process (the programs are run across processes by the root's ExamplesTests).
    .testTarget(
      name: "ExampleKitsTests",
      dependencies: [
        "SimpleTimerKit", "VideoWidgetKit", "TestImageKit", .product(name: "GroupContainer", package: rootIdentity),
      ],
      path: "Tests/ExampleKitsTests"),
  ]
)

for target in package.targets
where target.type != .system && target.name != "CThumbnailCodec"
  && target.name != "CFuzzShim"
{
  target.swiftSettings = (target.swiftSettings ?? []) + [.swiftLanguageMode(.v6)]
}
