import Foundation
import ImageCache
import Testing
import TestSupport

@Suite(.runSlot(.minutes(10))) struct ImageFormatTests {
  @Test func refusesBytesThatAreNoImage() {
    #expect(throws: ImageCacheError.self) { try CachedImage(data: Data("hello".utf8)) }
  }
}
