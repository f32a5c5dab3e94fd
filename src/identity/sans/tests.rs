use super::*;
use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn node(addresses: &[(&str, &str)]) -> Node {
    Node {
        status: Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|(t, a)| NodeAddress {
                        type_: t.to_string(),
                        address: a.to_string(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

fn sans(dns: &[&str], ip_list: &[&str]) -> Sans {
    Sans {
        dns: strings(dns),
        ips: ips(ip_list),
    }
}

/// What, the Node's (type, address) pairs, the SANs wanted.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Option<Sans>);

#[test]
fn node_addresses_map_as_the_kubelet_maps_them() {
    let cases: Vec<Case> = vec![
        (
            "every address type",
            vec![
                ("Hostname", "worker-1"),
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "203.0.113.7"),
                ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
                ("ExternalDNS", "worker-1.example.com"),
            ],
            Some(sans(
                &[
                    "ip-10-0-0-5.ec2.internal",
                    "worker-1",
                    "worker-1.example.com",
                ],
                &["10.0.0.5", "203.0.113.7"],
            )),
        ),
        (
            "duplicates across types collapse; sorted",
            vec![
                ("InternalIP", "10.0.0.9"),
                ("ExternalIP", "10.0.0.9"),
                ("InternalIP", "10.0.0.1"),
                ("Hostname", "b"),
                ("InternalDNS", "b"),
                ("ExternalDNS", "a"),
            ],
            Some(sans(&["a", "b"], &["10.0.0.1", "10.0.0.9"])),
        ),
        (
            "IPv6 and dual stack; IPv4 sorts before IPv6",
            vec![
                ("InternalIP", "fd00::5"),
                ("InternalIP", "10.0.0.5"),
                ("InternalIP", "fd00:0:0::5"),
            ],
            Some(sans(&[], &["10.0.0.5", "fd00::5"])),
        ),
        (
            "a Hostname that is an IP is an IP SAN",
            vec![("Hostname", "192.0.2.1")],
            Some(sans(&[], &["192.0.2.1"])),
        ),
        (
            "IP types that do not parse are skipped; unknown types ignored; empty skipped",
            vec![
                ("InternalIP", "not-an-ip"),
                ("ExternalIP", ""),
                ("Hostname", ""),
                ("SomethingNew", "10.9.9.9"),
                ("Hostname", "Worker-1"),
            ],
            Some(sans(&["worker-1"], &[])),
        ),
        (
            "names that are not DNS names are left out",
            vec![
                ("Hostname", "bad_name"),
                ("ExternalDNS", "evil\u{1b}[31m.example"),
                ("InternalIP", "10.0.0.5"),
            ],
            Some(sans(&[], &["10.0.0.5"])),
        ),
        ("no addresses", vec![], None),
        ("nothing usable", vec![("InternalIP", "nope")], None),
    ];
    for (what, addresses, want) in cases {
        assert_eq!(from_node(&node(&addresses)), want, "{what}");
    }
    assert_eq!(from_node(&Node::default()), None, "no status");
    let no_list = Node {
        status: Some(NodeStatus::default()),
        ..Node::default()
    };
    assert_eq!(from_node(&no_list), None, "status without addresses");
}

#[test]
fn settings_give_the_node_name_and_node_ip_or_the_detected_addresses() {
    let detected = ips(&["192.168.1.10", "2001:db8::10"]);
    // --node-ip given: it wins over the detected addresses.
    assert_eq!(
        from_settings("worker-1", &ips(&["10.0.0.5", "fd00::5"]), &detected, &[]),
        sans(&["worker-1"], &["10.0.0.5", "fd00::5"])
    );
    // No --node-ip: the default-route interface's addresses.
    assert_eq!(
        from_settings("worker-1", &[], &detected, &[]),
        sans(&["worker-1"], &["192.168.1.10", "2001:db8::10"])
    );
    // Nothing known: the node name only, which is not enough for a CSR.
    let bare = from_settings("worker-1", &[], &[], &[]);
    assert_eq!(bare, sans(&["worker-1"], &[]));
    assert!(!usable(&bare));
}

#[test]
fn extras_are_ips_or_names_and_join_either_set() {
    let extra = strings(&[
        "10.0.0.5",
        "Node.Example.COM",
        " fd00::1 ",
        "a.example",
        "10.0.0.5",
    ]);
    assert_eq!(
        from_settings("worker-1", &ips(&["10.0.0.5"]), &[], &extra),
        sans(
            &["a.example", "node.example.com", "worker-1"],
            &["10.0.0.5", "fd00::1"]
        )
    );
    let from_node = sans(&["worker-1"], &["10.0.0.9"]);
    assert_eq!(
        with_extra(from_node.clone(), &strings(&["lb.example", "192.0.2.1"])),
        sans(&["lb.example", "worker-1"], &["10.0.0.9", "192.0.2.1"])
    );
    assert_eq!(with_extra(from_node.clone(), &[]), from_node);
    // An extra IP alone makes a Node without IPs usable.
    let names_only = sans(&["worker-1"], &[]);
    assert!(!usable(&names_only));
    assert!(usable(&with_extra(names_only, &strings(&["192.0.2.1"]))));
    assert!(!usable(&Sans::default()));
}

#[test]
fn global_unicast_is_gos_definition() {
    for yes in [
        "10.0.0.1",
        "192.168.1.1",
        "203.0.113.7",
        "fd00::1",
        "2001:db8::1",
    ] {
        assert!(is_global_unicast(ip(yes)), "{yes}");
    }
    for no in [
        "127.0.0.1",
        "169.254.1.1",
        "224.0.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "::1",
        "fe80::1",
        "febf::1",
        "ff02::1",
        "::",
    ] {
        assert!(!is_global_unicast(ip(no)), "{no}");
    }
}

const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
wlan0\t00000000\t0100000A\t0003\t0\t0\t600\t00000000\t0\t0\t0
down0\t00000000\t0100000A\t0002\t0\t0\t700\t00000000\t0\t0\t0
eth0\t00000000\t0201A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0
short\t00000000
";

#[test]
fn ipv4_default_routes_from_proc_net_route() {
    assert_eq!(ipv4_default_ifaces(ROUTE), strings(&["eth0", "wlan0"]));
    let header_only = ROUTE.lines().next().unwrap();
    assert!(ipv4_default_ifaces(header_only).is_empty());
    assert!(ipv4_default_ifaces("").is_empty());
    // A default host route with a non-zero mask is not a default route.
    let host = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
                eth1\t00000000\t00000000\t0001\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n";
    assert!(ipv4_default_ifaces(host).is_empty());
}

const IPV6_ROUTE: &str = "\
fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth1
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00000201    wg0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000002 00000400 00000001 00000000 00000003     eth1
";

#[test]
fn ipv6_default_routes_from_proc_net_ipv6_route() {
    // eth1 once (two default routes), not the unreachable ones (RTF_REJECT) on lo and wg0.
    assert_eq!(ipv6_default_ifaces(IPV6_ROUTE), strings(&["eth1"]));
    assert!(ipv6_default_ifaces("").is_empty());
    assert!(ipv6_default_ifaces("garbage line\n").is_empty());
}

#[test]
fn addresses_of_the_default_route_interfaces_by_family() {
    let addrs: Vec<(String, IpAddr)> = [
        ("lo", "127.0.0.1"),
        ("lo", "::1"),
        ("eth0", "192.168.1.10"),
        ("eth0", "169.254.3.3"),
        ("eth0", "fe80::a"),
        ("eth0", "2001:db8::a"),
        ("eth1", "10.1.0.1"),
        ("eth1", "2001:db8:1::1"),
        ("eth1", "fe80::b"),
        ("docker0", "172.17.0.1"),
        ("eth0", "192.168.1.10"),
        ("wlan0", "10.2.0.1"),
    ]
    .iter()
    .map(|(n, a)| (n.to_string(), ip(a)))
    .collect();
    // IPv4 default route on eth0, IPv6 on eth1: each family from its own interface, no
    // loopback, link-local or repeats.
    assert_eq!(
        pick_addresses(&strings(&["eth0"]), &strings(&["eth1"]), &addrs),
        ips(&["192.168.1.10", "2001:db8:1::1"])
    );
    assert_eq!(
        pick_addresses(&strings(&["eth0"]), &strings(&["eth0"]), &addrs),
        ips(&["192.168.1.10", "2001:db8::a"])
    );
    assert!(pick_addresses(&[], &[], &addrs).is_empty());
    // The whole chain over sample files.
    let v4 = ipv4_default_ifaces(ROUTE);
    let v6 = ipv6_default_ifaces(IPV6_ROUTE);
    assert_eq!(
        pick_addresses(&v4, &v6, &addrs),
        ips(&["192.168.1.10", "2001:db8:1::1", "10.2.0.1"])
    );
}

/// (a) Only a successful Node read changes the SANs; the settings only while the Node does
/// not exist; a failed read keeps what is served, or waits.
#[test]
fn only_a_successful_node_read_changes_the_sans() {
    let node_sans = Sans::new(strings(&["n1"]), ips(&["10.0.0.5"]));
    let served = Sans::new(strings(&["n1"]), ips(&["10.0.0.4"]));
    let settings = || Sans::new(strings(&["n1"]), ips(&["192.168.1.9"]));
    let extra = strings(&["n1.example.test"]);
    let with_extra = Sans::new(strings(&["n1", "n1.example.test"]), ips(&["10.0.0.5"]));
    let found = NodeRead::Found(Some(node_sans.clone()));
    // (read, certificate in use) -> SANs to request
    let cases = [
        (found.clone(), Some(&served), Some(with_extra.clone())),
        (found, None, Some(with_extra)),
        (NodeRead::Missing, Some(&served), Some(settings())),
        (NodeRead::Missing, None, Some(settings())),
        (NodeRead::Found(None), Some(&served), Some(served.clone())),
        (NodeRead::Found(None), None, Some(settings())),
        (NodeRead::Failed, Some(&served), Some(served.clone())),
        (NodeRead::Failed, None, None),
    ];
    for (read, current, want) in cases {
        let label = format!("{read:?} with {current:?}");
        assert_eq!(wanted(read, current, settings, &extra), want, "{label}");
    }
}
