import Foundation
import ImageCache
import TestSupport
import Testing

@Suite(.runSlot(.minutes(10))) struct ImageFormatTests {
  @Test func refusesBytesThatAreNoImage() {
    #expect(throws: ImageCacheError.self) { try CachedImage(data: Data("hello".utf8)) }
  }
}
