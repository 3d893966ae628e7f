package kafkaarrow

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// schemaMeta returns the encoded stream and a checker over the flatbuffer
// metadata of its first (schema) message, positioned at the Schema table.
func schemaMeta(t *testing.T) (b []byte, meta []byte, c *fbCheck, schema uint32) {
	t.Helper()
	b = encode(t, edgeRecords())
	n := binary.LittleEndian.Uint32(b[4:])
	meta = b[8 : 8+n]
	c = &fbCheck{b: meta}
	root, err := c.u32(0)
	if err != nil {
		t.Fatal(err)
	}
	schema, ok, err := c.ref(root, 2)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	return b, meta, c, schema
}

// Each of these inputs kills a process that hands them to arrow-go's
// ipc.NewReader (a fatal out-of-memory or stack overflow, which recover
// cannot catch); Decode must reject them before arrow-go reads them.
func TestHostileMetadata(t *testing.T) {
	t.Run("huge fields vector", func(t *testing.T) {
		b, meta, c, schema := schemaMeta(t)
		start, n, err := c.vector(schema, 1, 4)
		if err != nil || n != len(Schema.Fields()) {
			t.Fatal(n, err)
		}
		binary.LittleEndian.PutUint32(meta[start-4:], 0x7fffffff)
		_, err = NewDecoder().Decode(b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "vector") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("field that is its own child", func(t *testing.T) {
		b, meta, c, schema := schemaMeta(t)
		start, _, err := c.vector(schema, 1, 4)
		if err != nil {
			t.Fatal(err)
		}
		headers, err := c.table(start, 6) // the headers field: it has a child
		if err != nil {
			t.Fatal(err)
		}
		kids, n, err := c.vector(headers, 5, 4)
		if err != nil || n != 1 {
			t.Fatal(n, err)
		}
		// uint32 offsets wrap around: point the child back at its parent.
		binary.LittleEndian.PutUint32(meta[kids:], headers-kids)
		_, err = NewDecoder().Decode(b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "nested") {
			t.Fatalf("got %v", err)
		}
	})
}
