// The download agent's executable: sessions start it on demand (see AgentLauncher in BackgroundDownloads).
import DownloadAgent

await DownloadAgentMain.main()
