// The macOS network extension: a thin NEPacketTunnelProvider over the C ABI of crates/ffi
// (module WireGuardFFI, from `make apple`). Every decision that can be made without the
// system lives in Rust and is tested on Linux: parsing the wg-quick file, the network settings
// and the UAPI text (`wgNetworkSettings`), finding the utun descriptor (`wgFindUtunFd`). This
// file only moves their results into NetworkExtension calls. docs/embedding.md, "The network
// extension", says how an app installs it and what only a Mac can verify.

import Foundation
import Network
import NetworkExtension
import os.log
import WireGuardFFI

/// Why the tunnel did not start.
enum TunnelError: Error, CustomStringConvertible {
    case missingConfiguration
    case badConfiguration(String)
    case badMemoryBudget(String)
    case noUtunDescriptor
    case turnOnFailed

    var description: String {
        switch self {
        case .missingConfiguration:
            return "the provider configuration has no \(PacketTunnelProvider.configKey) string"
        case .badConfiguration(let why):
            return "the wg-quick configuration was refused: \(why)"
        case .badMemoryBudget(let value):
            return "the provider configuration's \(PacketTunnelProvider.memoryBudgetKey) is "
                + "\(value): the packet-memory cap is a whole number of bytes, 0 (no cap) or "
                + "at least 1 MiB (1048576)"
        case .noUtunDescriptor:
            return "no utun descriptor in the extension's process"
        case .turnOnFailed:
            return "wgTurnOn failed (the reason is in the log)"
        }
    }
}

/// Forwards the library's log lines to the unified log (level 1: errors and warnings).
private let libraryLog = OSLog(subsystem: "vpn.network-extension", category: "wireguard")

/// The provider's own errors (why a start was refused).
private let providerLog = OSLog(subsystem: "vpn.network-extension", category: "provider")

private func installLogger() {
    wgSetLogger(nil) { _, level, message in
        guard let message = message else { return }
        os_log("%{public}s", log: libraryLog, type: level == 1 ? .error : .debug,
               String(cString: message))
    }
}

class PacketTunnelProvider: NEPacketTunnelProvider {
    /// The key of the wg-quick file's text in `NETunnelProviderProtocol.providerConfiguration`.
    static let configKey = "wgQuickConfig"
    /// The key of the packet-memory cap in bytes (a number) in `providerConfiguration`:
    /// `wgSetMemoryBudget`'s value, 0 for no cap. Absent, the library's default
    /// (`WG_DEFAULT_MEMORY_BUDGET`, 32 MiB), also in a process an earlier start set a cap in.
    static let memoryBudgetKey = "memoryBudget"

    /// Every access to `handle` and the path monitor happens on this queue.
    private let queue = DispatchQueue(label: "vpn.network-extension.tunnel")
    private var handle: Int32 = -1
    private var pathMonitor: NWPathMonitor?

    override func startTunnel(options: [String: NSObject]?,
                              completionHandler: @escaping (Error?) -> Void) {
        installLogger()
        guard let proto = protocolConfiguration as? NETunnelProviderProtocol,
              let text = proto.providerConfiguration?[Self.configKey] as? String else {
            completionHandler(TunnelError.missingConfiguration)
            return
        }
        if let error = Self.setMemoryBudget(from: proto.providerConfiguration) {
            os_log("%{public}s", log: providerLog, type: .error, error.description)
            completionHandler(error)
            return
        }
        let settings: TunnelSettings
        do {
            settings = try TunnelSettings.from(wgQuickConfig: text)
        } catch {
            completionHandler(error)
            return
        }
        setTunnelNetworkSettings(settings.networkSettings()) { [weak self] error in
            guard let self = self else { return }
            if let error = error {
                completionHandler(error)
                return
            }
            self.queue.async {
                completionHandler(self.turnOn(uapi: settings.uapi))
            }
        }
    }

    /// Sets the cap on packet memory of the tunnel `wgTurnOn` starts: the provider
    /// configuration's, or the library's default when it has none (the setting belongs to the
    /// process, which may have run an earlier start with another configuration). A value that
    /// is not a whole number, or that the library refuses (-22: negative, or below 1 MiB),
    /// refuses the start: an extension that asked for a cap under its memory limit must not
    /// run without it.
    private static func setMemoryBudget(from config: [String: Any]?) -> TunnelError? {
        guard let value = config?[memoryBudgetKey] else {
            _ = wgSetMemoryBudget(Int64(WG_DEFAULT_MEMORY_BUDGET))
            return nil
        }
        guard let number = value as? NSNumber, let bytes = Int64(exactly: number),
              wgSetMemoryBudget(bytes) == 0 else {
            return TunnelError.badMemoryBudget("\(value)")
        }
        return nil
    }

    /// On `queue`: hands the utun descriptor and the settings to the library.
    private func turnOn(uapi: String) -> Error? {
        let fd = wgFindUtunFd()
        guard fd >= 0 else { return TunnelError.noUtunDescriptor }
        let h = uapi.withCString { wgTurnOn($0, fd) }
        guard h >= 0 else { return TunnelError.turnOnFailed }
        handle = h
        // As WireGuardKit: the host, not the peer's packets, decides where a peer is.
        wgDisableSomeRoamingForBrokenMobileSemantics(h)
        let monitor = NWPathMonitor()
        monitor.pathUpdateHandler = { [weak self] _ in
            // Already on `queue`: a new network (Wi-Fi to Ethernet, a new address) means new
            // sockets and a keepalive so peers learn where we are.
            guard let self = self, self.handle >= 0 else { return }
            wgBumpSockets(self.handle)
        }
        monitor.start(queue: queue)
        pathMonitor = monitor
        return nil
    }

    override func stopTunnel(with reason: NEProviderStopReason,
                             completionHandler: @escaping () -> Void) {
        queue.async {
            self.pathMonitor?.cancel()
            self.pathMonitor = nil
            if self.handle >= 0 {
                wgTurnOff(self.handle)
                self.handle = -1
            }
            completionHandler()
        }
    }

    /// The app asks for the running configuration (statistics, last handshakes): the reply is
    /// `wgGetConfig`'s UAPI text, or nil while no tunnel runs.
    override func handleAppMessage(_ messageData: Data, completionHandler: ((Data?) -> Void)?) {
        guard let completionHandler = completionHandler else { return }
        queue.async {
            guard self.handle >= 0, let text = wgGetConfig(self.handle) else {
                completionHandler(nil)
                return
            }
            defer { free(text) }
            completionHandler(Data(String(cString: text).utf8))
        }
    }
}
