import Logging

LoggingSystem.bootstrap { label -> any LogHandler in
  if label == "GroupContainer.MemoryWarnings" { return SwiftLogNoOpLogHandler() }
  return StreamLogHandler.standardError(label: label)
}
