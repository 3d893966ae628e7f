package docgen_test

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/docgen"
	_ "github.com/connect-eos/connect-eos/plugin"
)

var update = flag.Bool("update", false, "rewrite docs/components from the specs")

const docsDir = "../../docs/components"

// TestDocsUpToDate fails when docs/components differs from what the specs
// render: a field added, renamed or re-documented without regenerating.
func TestDocsUpToDate(t *testing.T) {
	got, err := docgen.Render(service.GlobalEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no component rendered: is the plugin package imported?")
	}
	if *update {
		if err := os.RemoveAll(docsDir); err != nil {
			t.Fatal(err)
		}
		for p, b := range got {
			fp := filepath.Join(docsDir, p)
			if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(fp, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	onDisk := map[string]bool{}
	_ = filepath.WalkDir(docsDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(docsDir, p)
			onDisk[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	for p, b := range got {
		disk, err := os.ReadFile(filepath.Join(docsDir, p))
		if err != nil {
			t.Errorf("docs/components/%s is missing: run go test ./internal/docgen -update", p)
			continue
		}
		if string(disk) != string(b) {
			t.Errorf("docs/components/%s is stale: run go test ./internal/docgen -update", p)
		}
		delete(onDisk, p)
	}
	for p := range onDisk {
		t.Errorf("docs/components/%s documents no registered component: run go test ./internal/docgen -update", p)
	}
}
