// libFuzzer harness for the video widget's decoder entry points (the C shim over libpng and libjpeg-turbo, and
// the Swift wrapper around it: VideoWidgetKit's Thumbnail.swift and TerminalArt.swift, compiled in through
// symlinks). Build and run with `Fuzz/run.sh ThumbnailDecodeFuzz`; seeds are the image test fixtures
// (Tests/ImageCacheTests/Fixtures/). A plain `swift build` compiles the stub at the bottom.

#if FUZZING
  import CFuzzShim
  import Foundation
  import Glibc

  // A small bound: the fuzzer must not spend its time in honest 64 Mpx decodes.
  let decoding = ThumbnailDecoding(maximumPixels: 1 << 20, maximumDecoderMemory: 8 << 20)

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = Data(bytes: data ?? UnsafePointer(bitPattern: 1)!, count: data == nil ? 0 : size)
    for result in [
      Result { () throws(ThumbnailError) in try decoding.decode(bytes) },
      Result { () throws(ThumbnailError) in try decoding.thumbnail(bytes, maxWidth: 32, maxHeight: 32) },
    ] {
      switch result {
      case .success(let image):
        precondition(image.width >= 1 && image.height >= 1 && image.pixels.count == image.width * image.height * 3)
        precondition(image.sourceWidth * image.sourceHeight <= decoding.maximumPixels, "decoded past the bound")
        _ = TerminalArt.halfBlocks(image)
      case .failure(let error):
        precondition(!error.description.isEmpty)
      }
    }
    return 0
  }

  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, { fuzzOne($0, $1) }))
#else
  print("ThumbnailDecodeFuzz was built without libFuzzer; build and run it with Fuzz/run.sh.")
#endif
