// What the video widget draws: 24-bit colour half blocks on a terminal, words elsewhere.
import Foundation

/// Text drawing for the video widget.
public enum TerminalArt {
  /// One line per two pixel rows: each cell is `▀` with the upper pixel as the foreground colour and the lower
  /// one as the background (24-bit SGR 38;2 and 48;2), so a cell shows two square-ish pixels. An odd last row
  /// leaves the lower half in the terminal's background. Each line ends with a reset.
  public static func halfBlocks(_ image: Thumbnail) -> [String] {
    var lines: [String] = []
    lines.reserveCapacity((image.height + 1) / 2)
    for top in stride(from: 0, to: image.height, by: 2) {
      var line = ""
      for x in 0..<image.width {
        let upper = image.pixel(x: x, y: top)
        line += "\u{1B}[38;2;\(upper.r);\(upper.g);\(upper.b)m"
        if top + 1 < image.height {
          let lower = image.pixel(x: x, y: top + 1)
          line += "\u{1B}[48;2;\(lower.r);\(lower.g);\(lower.b)m"
        } else {
          line += "\u{1B}[49m"
        }
        line += "▀"
      }
      lines.append(line + "\u{1B}[0m")
    }
    return lines
  }

  /// A grey frame of `columns` x `rows` cells with `label` in the middle: what the widget shows for an image
  /// that is not in the cache (yet), as a widget shows a placeholder view.
  public static func placeholder(columns: Int, rows: Int, label: String) -> [String] {
    let inner = max(0, columns - 2)
    let text = String(label.prefix(inner))
    var lines = ["┌" + String(repeating: "─", count: inner) + "┐"]
    for row in 1..<max(2, rows - 1) {
      if row == rows / 2 {
        let left = (inner - text.count) / 2
        lines.append(
          "│" + String(repeating: " ", count: left) + text + String(repeating: " ", count: inner - left - text.count)
            + "│")
      } else {
        lines.append("│" + String(repeating: "░", count: inner) + "│")
      }
    }
    lines.append("└" + String(repeating: "─", count: inner) + "┘")
    return lines
  }

  /// `[########------------]  40 %` (`fraction` clamped to 0...1; nil: an unknown total, `[????] …`).
  public static func progressBar(_ fraction: Double?, width: Int = 20) -> String {
    guard let fraction, fraction.isFinite else { return "[" + String(repeating: "?", count: width) + "]   ? %" }
    let clamped = min(1, max(0, fraction))
    let filled = Int((clamped * Double(width)).rounded(.down))
    let percent = Int((clamped * 100).rounded(.down))
    let number = String(repeating: " ", count: 3 - String(percent).count) + String(percent)
    return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] \(number) %"
  }

  /// A thumbnail in words, for a log or a pipe: its sizes and mean colour.
  public static func describe(_ image: Thumbnail) -> String {
    var sums = (0, 0, 0)
    for i in stride(from: 0, to: image.pixels.count, by: 3) {
      sums.0 += Int(image.pixels[i])
      sums.1 += Int(image.pixels[i + 1])
      sums.2 += Int(image.pixels[i + 2])
    }
    let n = max(1, image.width * image.height)
    let hex = String(format: "#%02x%02x%02x", sums.0 / n, sums.1 / n, sums.2 / n)
    return "\(image.sourceWidth)x\(image.sourceHeight), \(image.width)x\(image.height) thumbnail, mean colour \(hex)"
  }

  /// Bytes in a short human form: "812 KB", "1.5 MB".
  public static func bytes(_ count: Int) -> String {
    if count < 1_000 { return "\(count) B" }
    if count < 1_000_000 { return "\(count / 1_000) KB" }
    return String(format: "%.1f MB", Double(count) / 1_000_000)
  }
}
