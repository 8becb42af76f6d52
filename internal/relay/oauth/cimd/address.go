package cimd

import (
	"net"
	"net/netip"
)

// special is a range of addresses the fetcher judges as a whole.
type special struct {
	prefix netip.Prefix
	// name is the range's name in the registry it comes from.
	name string
	// public ranges may hold a document; the others are refused.
	public bool
	// v4 is, for a form that carries an IPv4 address, the index of that
	// address's first byte in the IPv6 address: the address is judged
	// as that IPv4 address instead. 0 for none.
	v4 int
}

func refused(prefix, name string) special {
	return special{prefix: netip.MustParsePrefix(prefix), name: name}
}

// carrying is a form whose IPv4 address, from byte at, is judged in its
// place: what a packet to it reaches is that IPv4 address, through a
// translator or a tunnel, or the host itself on a dual-stack socket.
func carrying(prefix, name string, at int) special {
	return special{prefix: netip.MustParsePrefix(prefix), name: name, v4: at}
}

// specials are the ranges the fetcher judges, the most specific first:
// the first that holds an address decides. They are every range of the
// IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its
// updates) that is not globally reachable, and multicast, under the
// registries' names; an IPv4 address in none of them is public, an IPv6
// address only within Global Unicast (2000::/3), since IANA allocates no
// unicast space outside it.
//
// Where a refused block holds a globally reachable one (192.0.0.9 and
// 192.0.0.10 in 192.0.0.0/24; in 2001::/23 the anycast addresses of
// 2001:1::/48, AMT, AS112-v6, ORCHIDv2 and the DRIP entity tags), the
// block is refused whole: those are anycast protocol services, DNS sinks
// and identifiers, none of them a web site's address, so nothing is lost.
//
// The forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible,
// NAT64's well-known prefix and 6to4) are judged by that address, as
// IPv4. For 6to4 this allows the form of a public IPv4 address: a packet
// to 2002:V4ADDR:: goes to V4ADDR, encapsulated, or to a 6to4 relay that
// sends it there, so it reaches no more than V4ADDR itself does, while
// the form of a private one would reach into a network a host with a
// 6to4 interface sits in. A NAT64 prefix of the network's own choosing
// (64:ff9b:1::/48 and network-specific prefixes) cannot be read without
// knowing the network: the local-use one is refused whole, as the
// registry says it is not globally reachable, and an operator whose
// relay reaches the internet through a network-specific prefix must know
// that an address in it can name any IPv4 address behind the translator.
var specials = []special{
	// IANA IPv4 Special-Purpose Address Registry.
	refused("0.0.0.0/32", "This host on this network"),
	refused("0.0.0.0/8", "This network"),
	refused("10.0.0.0/8", "Private-Use"),
	refused("100.64.0.0/10", "Shared Address Space"),
	refused("127.0.0.0/8", "Loopback"),
	refused("169.254.0.0/16", "Link Local"),
	refused("172.16.0.0/12", "Private-Use"),
	refused("192.0.0.0/29", "IPv4 Service Continuity Prefix"),
	refused("192.0.0.8/32", "IPv4 dummy address"),
	refused("192.0.0.170/32", "NAT64/DNS64 Discovery"),
	refused("192.0.0.171/32", "NAT64/DNS64 Discovery"),
	refused("192.0.0.0/24", "IETF Protocol Assignments"),
	refused("192.0.2.0/24", "Documentation (TEST-NET-1)"),
	refused("192.88.99.2/32", "6a44-relay anycast address"),
	refused("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)"),
	refused("192.168.0.0/16", "Private-Use"),
	refused("198.18.0.0/15", "Benchmarking"),
	refused("198.51.100.0/24", "Documentation (TEST-NET-2)"),
	refused("203.0.113.0/24", "Documentation (TEST-NET-3)"),
	refused("255.255.255.255/32", "Limited Broadcast"),
	refused("240.0.0.0/4", "Reserved"),
	// IANA IPv4 Multicast Address Space Registry.
	refused("224.0.0.0/4", "Multicast"),
	{prefix: netip.MustParsePrefix("0.0.0.0/0"), name: "every other IPv4 address", public: true},

	// IANA IPv6 Special-Purpose Address Registry.
	refused("::/128", "Unspecified Address"),
	refused("::1/128", "Loopback Address"),
	carrying("::ffff:0:0/96", "IPv4-mapped Address", 12),
	// Not in the registry: deprecated by RFC 4291, and still sent on by
	// some stacks as the IPv4 address it carries.
	carrying("::/96", "IPv4-compatible IPv6 address", 12),
	carrying("64:ff9b::/96", "IPv4-IPv6 Translat.", 12),
	refused("64:ff9b:1::/48", "IPv4-IPv6 Translat. (local use)"),
	refused("100::/64", "Discard-Only Address Block"),
	refused("100:0:0:1::/64", "Dummy IPv6 Prefix"),
	refused("2001::/32", "TEREDO"),
	refused("2001:2::/48", "Benchmarking"),
	refused("2001:10::/28", "Deprecated (previously ORCHID)"),
	refused("2001::/23", "IETF Protocol Assignments"),
	refused("2001:db8::/32", "Documentation"),
	carrying("2002::/16", "6to4", 2),
	refused("3fff::/20", "Documentation"),
	refused("5f00::/16", "Segment Routing (SRv6) SIDs"),
	refused("fc00::/7", "Unique-Local"),
	refused("fe80::/10", "Link-Local Unicast"),
	// IANA IPv6 Address Space Registry: deprecated by RFC 3879.
	refused("fec0::/10", "Site-Local (deprecated)"),
	// IANA IPv6 Multicast Address Space Registry.
	refused("ff00::/8", "Multicast"),
	{prefix: netip.MustParsePrefix("2000::/3"), name: "Global Unicast", public: true},
	// IANA IPv6 Address Space Registry: reserved by the IETF, or not
	// allocated.
	refused("::/0", "outside Global Unicast"),
}

// rangeOf is the first of specials that holds ip. An address with a zone
// is in none (a zone only means something on a link): it, and the zero
// Addr, get the zero special, which is refused.
func rangeOf(ip netip.Addr) special {
	for _, s := range specials {
		if s.prefix.Contains(ip) {
			return s
		}
	}
	return special{}
}

// Public reports whether ip is an address a document may live on without
// Options.AllowPrivate: an IPv4 address in none of the special-purpose
// ranges that are not globally reachable, an IPv6 address of Global
// Unicast in none of them, or a form that carries an IPv4 address
// (IPv4-mapped, IPv4-compatible, NAT64, 6to4) whose IPv4 address is
// public. Its ranges are specials'.
func Public(ip netip.Addr) bool {
	s := rangeOf(ip)
	if s.v4 > 0 {
		b := ip.As16()
		s = rangeOf(netip.AddrFrom4([4]byte(b[s.v4 : s.v4+4])))
	}
	return s.public
}

// checkAddress is the dialer's check of address, the "host:port" it is
// about to connect to after resolution: the host must be an IP address,
// and a public one unless allowPrivate.
func checkAddress(address string, allowPrivate bool) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return ErrAddress
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !allowPrivate && !Public(ip) {
		return ErrAddress
	}
	return nil
}
