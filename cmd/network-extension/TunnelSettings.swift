// The JSON `wgNetworkSettings` returns (crates/ffi/src/settings.rs, documented in
// docs/embedding.md) decoded and turned into NEPacketTunnelNetworkSettings, one field to one
// property: no decision is made here.

import Foundation
import NetworkExtension
import WireGuardFFI

struct TunnelSettings: Decodable {
    struct IPv4Address: Decodable { let address: String; let subnetMask: String }
    struct IPv4Route: Decodable { let destination: String; let subnetMask: String }
    struct IPv6Address: Decodable { let address: String; let prefixLength: Int }
    struct IPv6Route: Decodable { let destination: String; let prefixLength: Int }
    struct IPv4: Decodable {
        let addresses: [IPv4Address]
        let includedRoutes: [IPv4Route]
        let excludedRoutes: [IPv4Route]
    }
    struct IPv6: Decodable {
        let addresses: [IPv6Address]
        let includedRoutes: [IPv6Route]
        let excludedRoutes: [IPv6Route]
    }
    struct DNS: Decodable {
        let servers: [String]
        let searchDomains: [String]
        let matchDomains: [String]
    }

    let tunnelRemoteAddress: String
    let ipv4: IPv4
    let ipv6: IPv6
    let dns: DNS?
    let mtu: Int?
    let tunnelOverheadBytes: Int?
    /// The settings text for `wgTurnOn`, endpoints resolved.
    let uapi: String

    private struct Refusal: Decodable { let error: String }

    /// Parses a wg-quick file through the library (`wgNetworkSettings`).
    static func from(wgQuickConfig text: String) throws -> TunnelSettings {
        guard let json = text.withCString({ wgNetworkSettings($0) }) else {
            throw TunnelError.badConfiguration("out of memory")
        }
        defer { free(json) }
        let data = Data(String(cString: json).utf8)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        if let refusal = try? decoder.decode(Refusal.self, from: data) {
            throw TunnelError.badConfiguration(refusal.error)
        }
        return try decoder.decode(TunnelSettings.self, from: data)
    }

    func networkSettings() -> NEPacketTunnelNetworkSettings {
        let s = NEPacketTunnelNetworkSettings(tunnelRemoteAddress: tunnelRemoteAddress)
        if !ipv4.addresses.isEmpty {
            let v4 = NEIPv4Settings(addresses: ipv4.addresses.map { $0.address },
                                    subnetMasks: ipv4.addresses.map { $0.subnetMask })
            v4.includedRoutes = ipv4.includedRoutes.map {
                NEIPv4Route(destinationAddress: $0.destination, subnetMask: $0.subnetMask)
            }
            v4.excludedRoutes = ipv4.excludedRoutes.map {
                NEIPv4Route(destinationAddress: $0.destination, subnetMask: $0.subnetMask)
            }
            s.ipv4Settings = v4
        }
        if !ipv6.addresses.isEmpty {
            let v6 = NEIPv6Settings(addresses: ipv6.addresses.map { $0.address },
                                    networkPrefixLengths: ipv6.addresses.map {
                                        NSNumber(value: $0.prefixLength)
                                    })
            v6.includedRoutes = ipv6.includedRoutes.map {
                NEIPv6Route(destinationAddress: $0.destination,
                            networkPrefixLength: NSNumber(value: $0.prefixLength))
            }
            v6.excludedRoutes = ipv6.excludedRoutes.map {
                NEIPv6Route(destinationAddress: $0.destination,
                            networkPrefixLength: NSNumber(value: $0.prefixLength))
            }
            s.ipv6Settings = v6
        }
        if let dns = dns {
            let d = NEDNSSettings(servers: dns.servers)
            d.searchDomains = dns.searchDomains
            d.matchDomains = dns.matchDomains
            s.dnsSettings = d
        }
        if let mtu = mtu {
            s.mtu = NSNumber(value: mtu)
        } else if let overhead = tunnelOverheadBytes {
            s.tunnelOverheadBytes = NSNumber(value: overhead)
        }
        return s
    }
}
