//! Which SANs the kubelet's serving certificate asks for: the Node's `status.addresses` once
//! it exists, else the node name and `--node-ip` (or the default-route interface's addresses),
//! plus the `--tls-san` extras. Pure choices; only [`default_route_addresses`] does IO.

use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Node;

use crate::config::is_dns1123_subdomain;
use crate::pki::Sans;

/// The SANs the kubelet would request from the Node's `status.addresses`
/// (`addressesToHostnamesAndIPs` in the kubelet's `pkg/kubelet/certificate/kubelet.go`):
/// `Hostname` (an IP if it parses as one, else a DNS name), `InternalDNS`/`ExternalDNS` as
/// DNS names, `InternalIP`/`ExternalIP` as IPs (skipped if they do not parse). Sorted and
/// de-duplicated; DNS names lower-cased. Unlike the kubelet, a name that is not a valid DNS
/// name is left out rather than put in a CSR every approver rejects. `None` when no address
/// yields a SAN (no status, no addresses, or none usable).
pub fn from_node(node: &Node) -> Option<Sans> {
    let addresses = node.status.as_ref()?.addresses.as_deref()?;
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for a in addresses {
        let text = a.address.as_str();
        if text.is_empty() {
            continue;
        }
        let ip = text.parse::<IpAddr>().ok();
        match (a.type_.as_str(), ip) {
            ("Hostname" | "InternalIP" | "ExternalIP", Some(ip)) => ips.push(ip),
            ("Hostname" | "InternalDNS" | "ExternalDNS", _) => dns.extend(dns_name(text)),
            _ => {}
        }
    }
    let sans = Sans::new(dns, ips);
    (!sans.is_empty()).then_some(sans)
}

/// The SANs before the Node exists, as the kubelet's own Node addresses would be: the node
/// name as a DNS name (its `Hostname` address); `node_ips` (`--node-ip`) when given, else the
/// `detected` default-route addresses; plus the `extra` names (`--tls-san`). Sorted and
/// de-duplicated.
pub fn from_settings(
    node_name: &str,
    node_ips: &[IpAddr],
    detected: &[IpAddr],
    extra: &[String],
) -> Sans {
    let ips = if node_ips.is_empty() {
        detected
    } else {
        node_ips
    };
    let base = Sans::new(dns_name(node_name).into_iter().collect(), ips.to_vec());
    with_extra(base, extra)
}

/// `sans` plus the `extra` names (`--tls-san`): each an IP if it parses as one, else a DNS
/// name (lower-cased). Sorted and de-duplicated.
pub fn with_extra(sans: Sans, extra: &[String]) -> Sans {
    let Sans { mut dns, mut ips } = sans;
    for e in extra.iter().map(|e| e.trim()) {
        match e.parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => dns.extend(dns_name(e)),
        }
    }
    Sans::new(dns, ips)
}

/// What one read of the Node said about its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRead {
    /// The Node, and the SANs its `status.addresses` give ([`from_node`]).
    Found(Option<Sans>),
    /// 404: the Node is not registered (not yet, or no longer).
    Missing,
    /// No usable answer (a timeout, a transport error, 5xx, 429, 401, 403): it says
    /// nothing about the Node's addresses.
    Failed,
}

/// The SANs to request after `read` (pure). Only a successful read changes them: the
/// Node's addresses plus `extra` (`--tls-san`). Only while the Node does not exist do
/// `settings` apply (the node name and `--node-ip`, as before it registers). Otherwise —
/// a failed read, or a Node without usable addresses yet — the SANs of the certificate in
/// use (`current`), so an API blip never files a CSR for other SANs; `None` when none is in
/// use yet after a failed read: wait for the next read.
pub fn wanted(
    read: NodeRead,
    current: Option<&Sans>,
    settings: impl FnOnce() -> Sans,
    extra: &[String],
) -> Option<Sans> {
    match read {
        NodeRead::Found(Some(sans)) => Some(with_extra(sans, extra)),
        NodeRead::Missing => Some(settings()),
        NodeRead::Found(None) => Some(current.cloned().unwrap_or_else(settings)),
        NodeRead::Failed => current.cloned(),
    }
}

/// Whether a serving CSR may be filed for `sans`: at least one IP, as the kubelet requires
/// (the `kubernetes.io/kubelet-serving` signer's approvers reject a CSR without one).
pub fn usable(sans: &Sans) -> bool {
    !sans.ips.is_empty()
}

/// Whether `ip` is a global unicast address, as Go's `net.IP.IsGlobalUnicast` (private
/// ranges count; loopback, link-local, multicast, unspecified and broadcast do not).
pub fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4 == Ipv4Addr::BROADCAST)
        }
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_loopback() || link_local || v6.is_multicast() || v6.is_unspecified())
        }
    }
}

/// The global unicast addresses of the interfaces holding a default route, read from
/// `/proc/net/route`, `/proc/net/ipv6_route` and the interface list (`getifaddrs`, a
/// netlink socket: the unit allows `AF_NETLINK` for it). An IPv4 default route contributes
/// its interface's IPv4 addresses and an IPv6 one its IPv6 addresses (as the kubelet's
/// `ChooseHostInterface` matches the family). Empty when nothing can be read, with one
/// warning: the caller then waits for `--node-ip` or the Node's addresses.
pub fn default_route_addresses() -> Vec<IpAddr> {
    const FIX: &str = "the serving certificate gets no IP SAN until the Node reports its addresses; set nodeIP (--node-ip)";
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let v4 = ipv4_default_ifaces(&read("/proc/net/route"));
    let v6 = ipv6_default_ifaces(&read("/proc/net/ipv6_route"));
    if v4.is_empty() && v6.is_empty() {
        tracing::warn!("no default route in /proc/net/route or /proc/net/ipv6_route: {FIX}");
        return Vec::new();
    }
    let addrs: Vec<(String, IpAddr)> = match if_addrs::get_if_addrs() {
        Ok(list) => list.into_iter().map(|i| (i.name.clone(), i.ip())).collect(),
        Err(e) => {
            // Under a sandbox without AF_NETLINK (RestrictAddressFamilies=): say so.
            tracing::warn!(error = %e, "cannot list interface addresses: {FIX}");
            return Vec::new();
        }
    };
    let picked = pick_addresses(&v4, &v6, &addrs);
    if picked.is_empty() {
        tracing::warn!(interfaces = ?[&v4[..], &v6[..]].concat(), "the default-route interfaces have no global unicast address: {FIX}");
    }
    picked
}

/// The interfaces of the IPv4 default routes in `/proc/net/route` text: Destination and Mask
/// `00000000`, flag RTF_UP set. In file order, without repeats.
pub fn ipv4_default_ifaces(text: &str) -> Vec<String> {
    const RTF_UP: u32 = 0x0001;
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT
        let [iface, dest, _, flags, _, _, _, mask, ..] = cols[..] else {
            continue;
        };
        let up = u32::from_str_radix(flags, 16).is_ok_and(|f| f & RTF_UP != 0);
        if dest == "00000000" && mask == "00000000" && up {
            push_new(&mut out, iface);
        }
    }
    out
}

/// The interfaces of the IPv6 default routes in `/proc/net/ipv6_route` text: destination
/// `::`, prefix length 0, RTF_UP set and RTF_REJECT clear (the kernel's unreachable default
/// route on `lo` is one). The interface is the last column. In file order, without repeats.
pub fn ipv6_default_ifaces(text: &str) -> Vec<String> {
    const RTF_UP: u32 = 0x0001;
    const RTF_REJECT: u32 = 0x0200;
    let mut out = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // dest dest_len src src_len next_hop metric refcnt use flags iface
        let [dest, dest_len, _, _, _, _, _, _, flags, iface] = cols[..] else {
            continue;
        };
        let Ok(flags) = u32::from_str_radix(flags, 16) else {
            continue;
        };
        let default = dest.len() == 32 && dest.bytes().all(|b| b == b'0') && dest_len == "00";
        if default && flags & RTF_UP != 0 && flags & RTF_REJECT == 0 && iface != "lo" {
            push_new(&mut out, iface);
        }
    }
    out
}

/// The global unicast addresses in `addrs` (interface name, address) of the `v4` interfaces
/// (IPv4 only) and the `v6` interfaces (IPv6 only).
pub fn pick_addresses(v4: &[String], v6: &[String], addrs: &[(String, IpAddr)]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (iface, ip) in addrs {
        let routed = match ip {
            IpAddr::V4(_) => v4.contains(iface),
            IpAddr::V6(_) => v6.contains(iface),
        };
        if routed && is_global_unicast(*ip) && !out.contains(ip) {
            out.push(*ip);
        }
    }
    out
}

fn push_new(out: &mut Vec<String>, iface: &str) {
    if !out.iter().any(|i| i == iface) {
        out.push(iface.to_string());
    }
}

/// `name` lower-cased, if it is a valid DNS name.
fn dns_name(name: &str) -> Option<String> {
    let name = name.to_ascii_lowercase();
    is_dns1123_subdomain(&name).then_some(name)
}

#[cfg(test)]
mod tests;
