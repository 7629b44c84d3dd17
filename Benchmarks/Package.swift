// swift-tools-version: 6.1
// Benchmarks of the root package, kept in a nested package so that `swift build` / `swift test` of the root
// never build package-benchmark. Run from this directory:
//
//   swift package --allow-writing-to-package-directory benchmark
//
// (or `make bench` from the root). See CoordinationBenchmarks/CoordinationBenchmarks.swift for what is measured.
import PackageDescription

// A path dependency is named by its directory, not by its manifest's name: "main" here, but a clone may be
// called anything. So derive the identity from this package's parent directory.
let root = Context.packageDirectory.split(separator: "/").dropLast().last.map(String.init) ?? ""
let rootIdentity = root.lowercased()

let package = Package(
  name: "GroupContainerBenchmarks",
  platforms: [.macOS(.v15)],
  dependencies: [
    .package(path: ".."),
    .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
    // The file server's own (it is not a product of the root: see FileServer below).
    .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
    .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
    .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    // The durable floor of the small-files rows (DownloadBenchmarks/DurableFloor.swift): the agent's HTTP client.
    .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
  ],
  targets: [
    .target(name: "BenchmarkSupport", path: "BenchmarkSupport", swiftSettings: [.swiftLanguageMode(.v6)]),
    // package-benchmark finds benchmark targets by their directory: it must sit directly in a folder named
    // `Benchmarks` (this package's root), hence `path: "CoordinationBenchmarks"`.
    .executableTarget(
      name: "CoordinationBenchmarks",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "GroupContainer", package: rootIdentity),
        // Not imported: listed so the benchmark build also builds `groupctl` (same configuration, same
        // directory), which the handshake benchmark runs as "the other process".
        .product(name: "groupctl", package: rootIdentity),
        // Not imported either: the processes of the 64-process baseline, built beside the benchmark.
        "gc-bench-answerer",
      ],
      path: "CoordinationBenchmarks",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    // The other side of the 64-process baseline (BenchAnswerer/main.swift): no framework, Foundation only (and
    // BenchmarkSupport for its socket address).
    .executableTarget(
      name: "gc-bench-answerer", dependencies: ["BenchmarkSupport"], path: "BenchAnswerer",
      swiftSettings: [.swiftLanguageMode(.v6)]),
    .executableTarget(
      name: "DefaultsBenchmarks",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "GroupContainer", package: rootIdentity),
        .product(name: "groupctl", package: rootIdentity),  // the 4-process benchmark runs its stress writers
        "gc-bench-defaults-reader",  // not imported either: the memory rows' reader
      ],
      path: "DefaultsBenchmarks",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    // An app that uses only shared defaults (DefaultsReader/main.swift): no package-benchmark, so `make static-programs`
    // can also link it fully static.
    .executableTarget(
      name: "gc-bench-defaults-reader",
      dependencies: [
        .product(name: "SharedDefaults", package: rootIdentity),
        .product(name: "GroupContainerCore", package: rootIdentity),
        .product(name: "FileCoordination", package: rootIdentity),
      ],
      path: "DefaultsReader",
      swiftSettings: [.swiftLanguageMode(.v6)]),
    // The idle widget-like process of issue #37 item 6 (IdleWidget/main.swift), linked statically too by
    // `make static-programs`.
    .executableTarget(
      name: "gc-bench-idle-widget",
      dependencies: [
        .product(name: "SharedDefaults", package: rootIdentity),
        .product(name: "GroupContainerCore", package: rootIdentity),
        .product(name: "FileCoordination", package: rootIdentity),
        .product(name: "ImageCache", package: rootIdentity),
        .product(name: "BackgroundDownloads", package: rootIdentity),
        .product(name: "LiveActivities", package: rootIdentity),
      ],
      path: "IdleWidget",
      swiftSettings: [.swiftLanguageMode(.v6)]),
    .executableTarget(
      name: "ImageCacheBenchmarks",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "ImageCache", package: rootIdentity),
        .product(name: "GroupContainer", package: rootIdentity),
      ],
      path: "ImageCacheBenchmarks",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    // Allocations per operation, the thresholds `make bench-check` holds (Thresholds/): the libraries only — no
    // groupctl, no download agent, so its release build leaves out SwiftNIO and BoringSSL.
    .executableTarget(
      name: "AllocationBenchmarks",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "GroupContainer", package: rootIdentity),
        .product(name: "ImageCache", package: rootIdentity),
      ],
      path: "AllocationBenchmarks",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    // The root's test file server (Tests/GCFileServer, a symlink): not a product there, since a product's targets
    // join every dependent's graph; the download benchmarks run it beside themselves.
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
      path: "FileServer",
      swiftSettings: [.swiftLanguageMode(.v6)]),
    .executableTarget(
      name: "DownloadBenchmarks",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "GroupContainer", package: rootIdentity),
        // Not imported: built beside the benchmark, which runs them (the agent, the server).
        .product(name: "gc-download-agent", package: rootIdentity),
        "gc-file-server",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
      ],
      path: "DownloadBenchmarks",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
  ]
)
