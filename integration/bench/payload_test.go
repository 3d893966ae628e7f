package main

import (
	"encoding/json"
	"testing"
)

func TestJSONPayloads(t *testing.T) {
	for _, size := range []int{100, 1024} {
		vs, err := values("json", size)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, v := range vs {
			if len(v) != size {
				t.Fatalf("size %d: record %d has %d bytes", size, i, len(v))
			}
			var m map[string]any
			if err := json.Unmarshal(v, &m); err != nil {
				t.Fatalf("size %d: record %d is not JSON: %v: %s", size, i, err, v)
			}
			if seen[string(v)] {
				t.Fatalf("size %d: record %d repeats an earlier one", size, i)
			}
			seen[string(v)] = true
		}
		t.Logf("%d B: %s", size, vs[0])
	}
	if _, err := values("json", 20); err == nil {
		t.Fatal("a 20-byte order event was made")
	}
}
