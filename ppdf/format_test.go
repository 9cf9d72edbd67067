package ppdf

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// A probe's format travels in the optional section 0x80: decoded as it
// was, encoded again to the same bytes, in a pack of several builds too;
// a formats section naming a probe the module lacks is refused.
func TestFormatsSection(t *testing.T) {
	m := tinyModule()
	m.Probes[0].Format = "main(%d)"
	b := mustEncode(t, m)
	d, skipped, err := decode(b)
	if err != nil || skipped || d.Probes[0].Format != "main(%d)" {
		t.Fatalf("decode: %v skipped %v format %q", err, skipped, d.Probes[0].Format)
	}
	if again := mustEncode(t, d); !bytes.Equal(again, b) {
		t.Error("Encode(Decode(b)) != b with a format")
	}
	if !reflect.DeepEqual(d, m) {
		t.Errorf("decoded %+v\nwant %+v", d.Probes[0], m.Probes[0])
	}
	// a module without formats has no section: the bytes of before
	plain := tinyModule()
	if pb := mustEncode(t, plain); len(pb) >= len(b) {
		t.Errorf("no format: %d bytes, with one %d", len(pb), len(b))
	}
	builds := packBuilds()
	for _, bm := range builds {
		bm.Probes[0].Format = "%s"
	}
	pack := mustEncodePack(t, builds)
	got, err := DecodePack(pack)
	if err != nil || len(got) != len(builds) {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.Probes[0].Format != "%s" {
			t.Errorf("pack build %x: format %q", g.BuildID, g.Probes[0].Format)
		}
	}
	// probe index out of range
	bad := tinyModule()
	bad.Probes[0].Format = "x"
	raw, err := encode(bad)
	if err != nil {
		t.Fatal(err)
	}
	// the section's probe index is after its tag, length and count
	i := len(raw) - checksumSize - (sectionHead + 4 + 4 + 4 + 1)
	if raw[i] != tagFormats {
		t.Fatalf("no formats section at %d", i)
	}
	raw[i+1+4+4] = 5
	raw = seal(raw[:len(raw)-checksumSize])
	if _, err := Decode(raw); err == nil || !strings.Contains(err.Error(), "format 0 names probe 5") {
		t.Errorf("a format of probe 5 of 1: %v", err)
	}
}
