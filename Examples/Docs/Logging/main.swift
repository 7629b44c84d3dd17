import Logging

LoggingSystem.bootstrap { label in
  var handler = StreamLogHandler.standardError(label: label)
  handler.logLevel = label.hasPrefix("GroupContainer.") ? .warning : .info
  return handler
}
