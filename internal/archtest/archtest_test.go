// Package archtest checks the layering rules of ARCHITECTURE.md that the
// compiler does not: the pure packages import no Benthos, and the data path
// reads in one direction.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/connect-eos/connect-eos/"

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestPurePackagesImportNoBenthos(t *testing.T) {
	for _, pkg := range []string{"txnstate", "arrow"} {
		for _, d := range deps(t, pkg) {
			if strings.HasPrefix(d, "github.com/redpanda-data/benthos") {
				t.Errorf("%s depends on %s: it must stay free of Benthos", pkg, d)
			}
		}
	}
}

// TestDataPathOneDirection: input -> (arrow) -> output -> txnstate; no package
// reaches back into one that calls it. The input and the output meet only in
// handover/, which both import and which imports neither.
func TestDataPathOneDirection(t *testing.T) {
	forbidden := map[string][]string{
		"txnstate":   {"output", "input", "statecache", "arrow"},
		"arrow":      {"output", "input", "statecache", "txnstate"},
		"input":      {"output"},
		"output":     {"input"},
		"handover":   {"output", "input", "statecache", "txnstate"},
		"statecache": {"output", "input"},
	}
	for pkg, bad := range forbidden {
		for _, d := range deps(t, pkg) {
			for _, b := range bad {
				if d == module+b {
					t.Errorf("%s imports %s: the data path reads input -> output -> txnstate", pkg, b)
				}
			}
		}
	}
}
