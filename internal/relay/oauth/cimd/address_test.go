package cimd

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestSpecialPurposeRanges: every range the registries say is not
// globally reachable is refused, at its first and last address, and
// the addresses beside it are public; the forms that carry an IPv4
// address are judged by it. Nothing here is dialed.
func TestSpecialPurposeRanges(t *testing.T) {
	for addr, want := range map[string]bool{
		// IPv4: each range's ends, and the public addresses beside them.
		"0.0.0.0": false, "0.1.2.3": false, "0.255.255.255": false, "1.0.0.0": true,
		"9.255.255.255": true, "10.0.0.0": false, "10.255.255.255": false, "11.0.0.0": true,
		"100.63.255.255": true, "100.64.0.0": false, "100.127.255.255": false, "100.128.0.0": true,
		"126.255.255.255": true, "127.0.0.1": false, "127.255.255.255": false, "128.0.0.0": true,
		"169.253.255.255": true, "169.254.0.0": false, "169.254.169.254": false, "169.255.0.0": true,
		"172.15.255.255": true, "172.16.0.0": false, "172.31.255.255": false, "172.32.0.0": true,
		"191.255.255.255": true, "192.0.0.0": false, "192.0.0.8": false, "192.0.0.9": false,
		"192.0.0.10": false, "192.0.0.170": false, "192.0.0.255": false, "192.0.1.0": true,
		"192.0.2.0": false, "192.0.2.255": false, "192.0.3.0": true,
		"192.88.98.255": true, "192.88.99.1": false, "192.88.99.2": false, "192.88.100.0": true,
		"192.167.255.255": true, "192.168.0.0": false, "192.168.255.255": false, "192.169.0.0": true,
		"198.17.255.255": true, "198.18.0.0": false, "198.19.255.255": false, "198.20.0.0": true,
		"198.51.99.255": true, "198.51.100.0": false, "198.51.100.255": false, "198.51.101.0": true,
		"203.0.112.255": true, "203.0.113.0": false, "203.0.113.255": false, "203.0.114.0": true,
		"223.255.255.255": true, "224.0.0.0": false, "224.0.0.1": false, "239.255.255.255": false,
		"240.0.0.0": false, "255.255.255.254": false, "255.255.255.255": false,
		// Globally reachable ranges of the registry outside a refused block.
		"192.31.196.1": true, "192.52.193.1": true, "192.175.48.1": true,
		"93.184.216.34": true, "8.8.8.8": true,

		// IPv6.
		"::": false, "::1": false, "::2": false, "100::": false, "100::ffff:ffff:ffff:ffff": false,
		"100:0:0:1::": false, "100:0:0:2::": false, "1::1": false, "1fff:ffff::": false,
		"2000::": true, "2001::": false, "2001::1": false, "2001:1::1": false, "2001:1::2": false,
		"2001:2::1": false, "2001:3::1": false, "2001:4:112::1": false, "2001:10::1": false,
		"2001:20::1": false, "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff": false, "2001:200::": true,
		"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff": true, "2001:db8::": false,
		"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff": false, "2001:db9::": true,
		"2001:4860:4860::8888": true, "2606:2800:220:1::1": true, "2620:4f:8000::1": true,
		"3ffe:ffff::": true, "3fff::": false, "3fff:fff:ffff::": false, "3fff:1000::": true,
		"4000::": false, "5f00::1": false, "fbff::1": false, "fc00::": false, "fd12:3456::1": false,
		"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": false, "fe80::1": false, "febf::1": false,
		"fec0::1": false, "feff::1": false, "ff02::1": false, "ff0e::1": false,
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": false,
		"fe80::1%eth0": false, "2606:2800:220:1::1%eth0": false,

		// IPv4-mapped.
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::ffff:0.0.0.0": false,
		"::ffff:8.8.8.8": true, "::ffff:255.255.255.255": false,
		// SIIT's IPv4-translated form is not one the registries name.
		"::ffff:0:8.8.8.8": false, "::ffff:0:10.0.0.1": false,
		// IPv4-compatible.
		"::10.0.0.1": false, "::a00:1": false, "::127.0.0.1": false, "::169.254.169.254": false,
		"::8.8.8.8": true, "::1:0:0": false,
		// NAT64, the well-known prefix and the local-use one.
		"64:ff9b::a00:1": false, "64:ff9b::127.0.0.1": false, "64:ff9b::192.168.1.1": false,
		"64:ff9b::8.8.8.8": true, "64:ff9b::1:0:0": false, "64:ff9b:1::": false,
		"64:ff9b:1::808:808": false, "64:ff9b:1:ffff:ffff:ffff:ffff:ffff": false, "64:ff9b:2::": false,
		// 6to4.
		"2002:a00:1::1": false, "2002:7f00:1::": false, "2002:c0a8:101::1": false, "2002:a9fe:a9fe::": false,
		"2002:6440:1::": false, "2002:808:808::1": true, "2002:808:808:ffff:ffff:ffff:ffff:ffff": true,
		"2002:e000:1::": false, "2002::": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: public %v, want %v (%s)", addr, got, want, rangeOf(netip.MustParseAddr(addr)).name)
		}
	}
	if Public(netip.Addr{}) {
		t.Error("the zero address is public")
	}
}

// TestSpecialsTable: the table is read first match first, so no range
// comes before one it holds; each is a network address with its
// registry's name; the forms that carry an IPv4 address carry it within
// the address.
func TestSpecialsTable(t *testing.T) {
	for i, s := range specials {
		if s.prefix != s.prefix.Masked() || s.name == "" {
			t.Errorf("%v %q: not a network address with a name", s.prefix, s.name)
		}
		if s.v4 > 0 && (s.public || !s.prefix.Addr().Is6() || s.v4+4 > 16 || s.v4*8 < s.prefix.Bits()) {
			t.Errorf("%v: carries an IPv4 address at byte %d", s.prefix, s.v4)
		}
		for _, later := range specials[i+1:] {
			if s.prefix.Bits() <= later.prefix.Bits() && s.prefix.Contains(later.prefix.Addr()) {
				t.Errorf("%v comes before %v, which it holds", s.prefix, later.prefix)
			}
		}
		// A refused range's ends are refused.
		if !s.public && s.v4 == 0 {
			for _, end := range []netip.Addr{s.prefix.Addr(), last(s.prefix)} {
				if Public(end) {
					t.Errorf("%v (%s): %v is public", s.prefix, s.name, end)
				}
			}
		}
	}
	if s := rangeOf(netip.MustParseAddr("fe80::1%eth0")); s.public || s.prefix.IsValid() {
		t.Errorf("an address with a zone is in %v", s.prefix)
	}
}

// last is the last address of p.
func last(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// embed returns the IPv6 address whose bytes are prefix's with v4 at at.
func embed(prefix string, v4 netip.Addr, at int) netip.Addr {
	b := netip.MustParseAddr(prefix).As16()
	copy(b[at:], v4.AsSlice())
	return netip.AddrFrom16(b)
}

// TestCarriedAddressesJudgedAsIPv4: each form that carries an IPv4
// address is public exactly when that address is, at every range's
// ends; 6to4's bytes after the address change nothing.
func TestCarriedAddressesJudgedAsIPv4(t *testing.T) {
	for _, s := range specials {
		if !s.prefix.Addr().Is4() {
			continue
		}
		for _, v4 := range []netip.Addr{s.prefix.Addr(), last(s.prefix)} {
			sameAsIPv4(t, v4)
		}
	}
}

func sameAsIPv4(t *testing.T, v4 netip.Addr) {
	t.Helper()
	want := Public(v4)
	for _, a := range []netip.Addr{
		netip.AddrFrom16(v4.As16()), embed("::", v4, 12), embed("64:ff9b::", v4, 12),
		embed("2002::", v4, 2), embed("2002::ffff:ffff:ffff:ffff:ffff", v4, 2),
	} {
		if got := Public(a); got != want {
			t.Errorf("%v: public %v, and %v %v", a, got, v4, want)
		}
	}
}

// TestCheckAddress: the dialer's check takes an IP address and a port,
// public unless private ones are allowed; anything else is refused,
// whatever is allowed.
func TestCheckAddress(t *testing.T) {
	for address, want := range map[string][2]bool{ // refused without, with AllowPrivate
		"8.8.8.8:443": {false, false}, "[2001:4860:4860::8888]:443": {false, false},
		"10.0.0.1:443": {true, false}, "127.0.0.1:1": {true, false}, "[::1]:443": {true, false},
		"[64:ff9b::a00:1]:443": {true, false}, "[2002:a00:1::]:443": {true, false},
		"[fe80::1%eth0]:443": {true, false}, "255.255.255.255:443": {true, false},
		"c.example:443": {true, true}, "8.8.8.8": {true, true}, "": {true, true}, "[::1:443": {true, true},
	} {
		for i, allow := range []bool{false, true} {
			if err := checkAddress(address, allow); (err != nil) != want[i] || err != nil && err != ErrAddress {
				t.Errorf("%q, private allowed %v: %v", address, allow, err)
			}
		}
	}
}

// FuzzCheckAddress: an address the dialer's check lets through without
// AllowPrivate is an IP address none of netip's own tests calls local,
// private or special, nor is the IPv4 address its form carries; it is
// let through with AllowPrivate too; and an IPv4 address is judged as
// each form that carries it.
func FuzzCheckAddress(f *testing.F) {
	for _, s := range []string{"8.8.8.8:443", "10.0.0.1:443", "[::ffff:10.0.0.1]:443", "[64:ff9b::a00:1]:443",
		"[::a00:1]:1", "[2002:a00:1::]:443", "[2002:808:808::]:443", "[2001:db8::1]:443", "[fe80::1%eth0]:443",
		"c.example:443", "[2606:2800:220:1::1]:443", "198.18.0.1:443", "0.0.0.0:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, address string) {
		err := checkAddress(address, false)
		if err != nil {
			if err != ErrAddress {
				t.Fatalf("%q: %v", address, err)
			}
		} else {
			if checkAddress(address, true) != nil {
				t.Fatalf("%q: public, yet refused with private addresses allowed", address)
			}
			host, _, _ := net.SplitHostPort(address)
			ip := netip.MustParseAddr(host)
			if ip.Zone() != "" || local(ip) || strings.Contains(host, "%") {
				t.Fatalf("%q: let through", address)
			}
			if s := rangeOf(ip); s.v4 > 0 {
				b := ip.As16()
				if v4 := netip.AddrFrom4([4]byte(b[s.v4 : s.v4+4])); local(v4) {
					t.Fatalf("%q: let through, carrying %v", address, v4)
				}
			}
		}
		if host, _, e := net.SplitHostPort(address); e == nil {
			if ip, e := netip.ParseAddr(host); e == nil && ip.Is4() {
				sameAsIPv4(t, ip)
			}
		}
	})
}

// local reports what netip calls not public.
func local(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || !ip.IsGlobalUnicast()
}
