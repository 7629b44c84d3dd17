// swift-tools-version: 6.1
import PackageDescription

let package = Package(
  name: "GroupContainer",
  // Linux only (inotify, futex, openat2): no Apple platform is listed, and Sources/SystemLayer/Platform.swift stops a
  // build elsewhere with one clear error.
  products: [
    .library(name: "GroupContainer", targets: ["GroupContainer"]),
    .library(name: "GroupContainerCore", targets: ["GroupContainerCore"]),
    .library(name: "Messaging", targets: ["Messaging"]),
    .library(name: "FileCoordination", targets: ["FileCoordination"]),
    .library(name: "SharedDefaults", targets: ["SharedDefaults"]),
    .library(name: "PropertyList", targets: ["PropertyList"]),
    .library(name: "MemoryWarnings", targets: ["MemoryWarnings"]),
    .library(name: "ImageCache", targets: ["ImageCache"]),
    .library(name: "BackgroundDownloads", targets: ["BackgroundDownloads"]),
    .library(name: "DownloadAgent", targets: ["DownloadAgent"]),
    .library(name: "AppLaunching", targets: ["AppLaunching"]),
    .library(name: "AppIntents", targets: ["AppIntents"]),
    .library(name: "WidgetKit", targets: ["WidgetKit"]),
    .library(name: "LiveActivities", targets: ["LiveActivities"]),
    .executable(name: "groupctl", targets: ["groupctl"]),
    // What runs a dependent's downloads: `swift build --product gc-download-agent` puts it beside their executables.
    .executable(name: "gc-download-agent", targets: ["gc-download-agent"]),
    // Nothing else is a product: a product's targets join every dependent's graph, where target names must be
    // unique (an app with a target `host` or `widget` could not depend on this package). The demo apps, their kits
    // and the README's programs are the nested package in Examples/; the file server and the test helper are
    // executables of this package's tests only.
  ],
  // The test hooks — fault and pause points, the system-call recorder, simulated conditions, counters tests read —
  // are compiled only with this trait (`GROUPCONTAINER_TEST_HOOKS`): `make test` enables it, a dependent's build never
  // does (it is not a default trait), so a shipped library has none of them (TestHooksTests checks a dependent's
  // binaries).
  traits: [
    .trait(
      name: "TestHooks",
      description: "Compiles in the test hooks: fault and pause points, the system-call recorder, simulated conditions."
    )
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-atomics", from: "1.3.0"),
    .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    // TLS for the agent's extra trust roots and the test server's HTTPS and HTTP/2 (already pulled by
    // async-http-client; named here because the agent and the server import them).
    .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
    // The test server's certificates, made at its start.
    .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
    .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    // `swift package generate-documentation --target <Module>` (the DocC catalogs in Sources/*/Documentation.docc).
    .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
  ],
  targets: [
    // libinotifytools (Debian: libinotifytools0-dev), wrapped only by SystemLayer.
    .systemLibrary(name: "CInotifyTools", path: "Sources/CInotifyTools"),
    // What SystemLayer needs from C: futex, fallocate and the SIGBUS guard of shared mappings.
    .target(name: "CSystemShims"),
    // The only module that makes system calls.
    .target(
      name: "SystemLayer",
      dependencies: [
        "CInotifyTools", "CSystemShims",
        .product(name: "Atomics", package: "swift-atomics"),
        .product(name: "SystemPackage", package: "swift-system"),
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // The container: the `GroupContainer` type, its paths and the `.coordination/` layout, its errors. What a
    // module needs to find its files in a container, without the coordination machinery (opening one is FileCoordination's).
    .target(
      name: "GroupContainerCore",
      dependencies: ["SystemLayer", .product(name: "SystemPackage", package: "swift-system")]
    ),
    // Messages between processes: this process's liveness lock and inbox, the liveness rule, the message protocol
    // and its JSON, the transport, the ack board, the messenger. What messages are for is the business of the parts
    // that register with it (a receiver per message kind, a cleanup per dead process).
    .target(
      name: "Messaging",
      dependencies: [
        "GroupContainerCore", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "SystemPackage", package: "swift-system"),
      ]
    ),
    // Opening a container (this process's share of `.coordination/`), locks, presenters, the coordinator.
    .target(
      name: "FileCoordination",
      dependencies: [
        "GroupContainerCore", "Messaging", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "SystemPackage", package: "swift-system"),
      ]
    ),
    // The hardened plist codec: depends on nothing.
    .target(name: "PropertyList"),
    .target(
      name: "SharedDefaults",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "PropertyList", "SystemLayer", "MemoryWarnings",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // The low-memory eviction policy: memory pressure levels from Linux's signals, handlers per process.
    .target(
      name: "MemoryWarnings",
      dependencies: [
        "GroupContainerCore", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // Cached images: a memory tier per process over one disk tier in Library/Caches shared by the group.
    .target(
      name: "ImageCache",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "MemoryWarnings", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // Background downloads, the client side: sessions, tasks and events persisted in the container. No networking:
    // a widget linking it does not link SwiftNIO.
    .target(
      name: "BackgroundDownloads",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "PropertyList", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "SystemPackage", package: "swift-system"),
      ]
    ),
    // The download agent: the process that runs the transfers (AsyncHTTPClient) and publishes finished files.
    .target(
      name: "DownloadAgent",
      dependencies: [
        "BackgroundDownloads", "FileCoordination", "GroupContainerCore", "SystemLayer",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    .executableTarget(name: "gc-download-agent", dependencies: ["DownloadAgent"]),
    // Launching apps: URL schemes and their registrations, URL handlers, the one delivery path (launch, message,
    // answer) of URLs, handed-over files and intent requests, the intents' at-most-once ledger, Inbox hand-over. A
    // part of the container's messaging, registered on first use.
    .target(
      name: "AppLaunching",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "Messaging", "SystemLayer",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // Intents a widget asks the app to perform in the app's process (Apple's AppIntents), over AppLaunching's delivery.
    .target(
      name: "AppIntents",
      dependencies: [
        "AppLaunching", "FileCoordination", "GroupContainerCore", "Messaging",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    // Widget timelines and Today-widget updates, reloaded from any process (WidgetKit's model).
    .target(
      name: "WidgetKit",
      dependencies: [
        "GroupContainerCore", "SharedDefaults", .product(name: "Logging", package: "swift-log"),
      ]),
    // Live Activities (ActivityKit's model): one record per activity in the container, observed live by widgets.
    .target(
      name: "LiveActivities",
      dependencies: [
        "GroupContainerCore", "SystemLayer", "SharedDefaults", "PropertyList",
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    .target(
      name: "GroupContainer",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "Messaging", "SharedDefaults", "PropertyList", "MemoryWarnings",
        "ImageCache", "BackgroundDownloads",
        "AppLaunching", "AppIntents", "WidgetKit", "LiveActivities",
      ]),
    .executableTarget(
      name: "groupctl",
      dependencies: [
        "GroupContainer", "SystemLayer", "DownloadAgent", "LiveActivities",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
        // `stress storm`: the SHA-256 of the files it serves and of what the downloads published.
        .product(name: "Crypto", package: "swift-crypto"),
      ]
    ),
    // The scoreboard Live Activity of the demo (the Examples package compiles the same directory for its host and
    // widget): the test helper and the LiveActivities tests drive it. Not a product.
    .target(
      name: "ScoreboardKit", dependencies: ["LiveActivities", "AppIntents", "FileCoordination", "GroupContainerCore"],
      path: "Examples/ScoreboardKit"),
    // "The other process" that tests spawn: presenter, lock holder, crasher.
    .executableTarget(
      name: "gc-test-helper",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "SharedDefaults", "PropertyList", "SystemLayer", "ImageCache",
        "MemoryWarnings",
        "TestImageKit",
        "BackgroundDownloads", "AppLaunching", "AppIntents", "WidgetKit", "LiveActivities", "ScoreboardKit",
        "HelperCommand",
        // The agent's code run in this process: its system calls counted (SyscallCountModes.swift), its I/O faults
        // injected after the task is requested (the download loops).
        "DownloadAgent",
        .product(name: "Logging", package: "swift-log"),
      ],
      path: "Tests/GCTestHelper"
    ),
    // The local HTTP file server of tests, benchmarks and the demo (not a product: see above): Range, validators and switchable faults; HTTPS
    // over HTTP/1.1 and HTTP/2 with a certificate authority of its own.
    .executableTarget(
      name: "gc-file-server",
      dependencies: [
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOHTTP2", package: "swift-nio-http2"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
        .product(name: "X509", package: "swift-certificates"),
        .product(name: "SwiftASN1", package: "swift-asn1"),
        .product(name: "Crypto", package: "swift-crypto"),
      ],
      path: "Tests/GCFileServer"
    ),
    // libFuzzer harnesses: real only when built by Fuzz/run.sh (-DFUZZING, libclang_rt.fuzzer_no_main).
    .target(name: "CFuzzShim", path: "Fuzz/CFuzzShim"),
    .executableTarget(
      name: "PropertyListFuzz", dependencies: ["PropertyList", "CFuzzShim"], path: "Fuzz/PropertyListFuzz"),
    .executableTarget(
      name: "ContainerFilesFuzz",
      dependencies: [
        "SharedDefaults", "FileCoordination", "GroupContainerCore", "Messaging", "BackgroundDownloads",
        "LiveActivities", "AppLaunching", "AppIntents", "MemoryWarnings",
        "CFuzzShim",
      ],
      path: "Fuzz/ContainerFilesFuzz"),
    .executableTarget(
      name: "ImageHeadersFuzz", dependencies: ["ImageCache", "CFuzzShim"], path: "Fuzz/ImageHeadersFuzz"),
    // ResumePolicy.swift is compiled in (a symlink): the harness needs neither NIO nor BoringSSL.
    .executableTarget(
      name: "DownloadHeadersFuzz", dependencies: ["BackgroundDownloads", "CFuzzShim"], path: "Fuzz/DownloadHeadersFuzz"),
    .testTarget(name: "PropertyListTests", dependencies: ["PropertyList", "TestSupport"], exclude: ["Regressions"]),
    // Real images of any size for tests, the test helper and benchmarks.
    .target(name: "TestImageKit", path: "Tests/TestImageKit"),
    // The helper's commands (one Codable enum), shared by gc-test-helper and the tests that start it.
    .target(name: "HelperCommand", path: "Tests/HelperCommand"),
    // What every test target shares: temp container roots, child processes.
    .target(
      name: "TestSupport",
      dependencies: [
        "FileCoordination", "GroupContainerCore", "SystemLayer", "HelperCommand",
        .product(name: "Logging", package: "swift-log"),
      ],
      path: "Tests/TestSupport"),
    .testTarget(
      name: "SharedDefaultsTests",
      dependencies: [
        "TestSupport", "SharedDefaults", "PropertyList", "FileCoordination", "GroupContainerCore", "SystemLayer",
        "gc-test-helper",
        "groupctl",
      ]
    ),
    .testTarget(
      name: "ImageCacheTests",
      dependencies: [
        "TestSupport", "TestImageKit", "ImageCache", "MemoryWarnings", "FileCoordination", "GroupContainerCore",
        "SystemLayer",
        "gc-test-helper", "groupctl",
      ],
      resources: [.copy("Fixtures")]
    ),
    .testTarget(
      name: "WidgetKitTests",
      dependencies: [
        "TestSupport", "WidgetKit", "SharedDefaults", "FileCoordination", "GroupContainerCore", "gc-test-helper",
        "groupctl",
      ]),
    .testTarget(
      name: "BackgroundDownloadsTests",
      dependencies: [
        "TestSupport", "BackgroundDownloads", "DownloadAgent", "FileCoordination", "GroupContainerCore", "PropertyList",
        "SystemLayer",
        "gc-test-helper",
        "groupctl", "gc-download-agent", "gc-file-server",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
      ]
    ),
    .testTarget(
      name: "LiveActivitiesTests",
      dependencies: [
        "TestSupport", "LiveActivities", "ScoreboardKit", "FileCoordination", "GroupContainerCore", "SystemLayer",
        "SharedDefaults",
        "gc-test-helper",
        "groupctl",
      ]
    ),
    .testTarget(
      name: "ExamplesTests",
      // The programs it runs are built by the Examples package (`swift build --package-path Examples`); these are
      // the ones they use from here.
      dependencies: ["TestSupport", "GroupContainer", "gc-file-server", "gc-download-agent", "groupctl"]),
    .testTarget(
      name: "AppIntentsTests",
      dependencies: [
        "TestSupport", "AppIntents", "AppLaunching", "FileCoordination", "GroupContainerCore", "Messaging",
        "SystemLayer", "gc-test-helper", "groupctl",
      ]
    ),
    .testTarget(
      name: "FileCoordinationTests",
      dependencies: [
        "TestSupport", "AppLaunching", "FileCoordination", "GroupContainerCore", "Messaging", "SystemLayer",
        "GroupContainer", "gc-test-helper", "groupctl",
        "gc-file-server",  // the download of SyscallThresholdsTests
      ]
    ),
  ]
)

for target in package.targets
where target.type != .system && target.name != "CSystemShims" && target.name != "CFuzzShim" {
  target.swiftSettings =
    (target.swiftSettings ?? []) + [
      .swiftLanguageMode(.v6),
      .define("GROUPCONTAINER_TEST_HOOKS", .when(traits: ["TestHooks"])),
    ]
}
