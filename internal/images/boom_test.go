package images

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// The boom segment is a valid TCP segment: it decodes to what was encoded,
// and its checksum verifies (the sum over pseudo-header and segment, checksum
// included, folds to 0xffff) for both families and odd payloads.
func TestBoomSegment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		data     string
	}{
		{"ipv4", "10.244.1.5", "10.244.2.7", "boom!!!"},
		{"ipv4 even payload", "10.244.1.5", "10.244.2.7", "boom!!"},
		{"ipv6", "fd00:10:244::5", "fd00:10:244::7", "boom!!!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := netip.MustParseAddr(tc.src), netip.MustParseAddr(tc.dst)
			h := tcpHeader{SrcPort: 9000, DstPort: 41234, Seq: 4294867296, Ack: 77, Flags: 5<<12 | tcpPSH | tcpACK, Window: 502}
			b := encodeTCP(h, src, dst, []byte(tc.data))
			got, data, err := decodeTCP(b)
			if err != nil {
				t.Fatal(err)
			}
			h.Checksum = binary.BigEndian.Uint16(b[16:])
			if got != h || string(data) != tc.data {
				t.Errorf("decoded %+v %q, want %+v %q", got, data, h, tc.data)
			}
			if flagString(got.Flags) != "PSH ACK" {
				t.Errorf("flags %q, want PSH ACK", flagString(got.Flags))
			}
			// Re-summing with the checksum in place gives 0 after complement.
			if c := tcpChecksum(src, dst, b); c != 0 {
				t.Errorf("checksum does not verify: residue %#04x", c)
			}
		})
	}
	if _, _, err := decodeTCP(make([]byte, 12)); err == nil {
		t.Error("a 12-byte segment decoded")
	}
}
