import Foundation
import ImageCache
import Testing

@Suite struct ImageFormatTests {
  @Test func refusesBytesThatAreNoImage() {
    #expect(throws: ImageCacheError.self) { try CachedImage(data: Data("hello".utf8)) }
  }
}
