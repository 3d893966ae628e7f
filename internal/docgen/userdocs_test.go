package docgen_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// userDocs are the pages a user reads: README.md and docs/*.md (the
// rendered component pages are checked by TestDocsUpToDate and
// TestNoAntoraXrefs).
func userDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	docs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[strings.TrimPrefix(f, "../../")] = string(b)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %v", files)
	}
	return docs
}

// TestUserDocsSayWhatIsTrue: the user docs name no file users do not have
// (../shared/), no deprecated meta() in examples, no Antora xref, and every
// metric they name is one the components declare (served with _seconds for
// the timers declared in _ns, which the docs must not name).
func TestUserDocsSayWhatIsTrue(t *testing.T) {
	var src strings.Builder
	for _, dir := range []string{"input", "output", "statecache"} {
		files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	code := src.String()
	examples, err := filepath.Glob("../../config/examples/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range examples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "meta(") {
			t.Errorf("%s uses the deprecated meta() (metadata() is its replacement)", f)
		}
	}
	// A name, and what follows it: a file name (.yaml) or a family
	// (kafka_eos_k2k_*) is not a metric.
	metric := regexp.MustCompile(`\bkafka_(?:eos|native|state)_[a-z0-9_]*[a-z0-9](\.yaml|_?\*)?`)
	for name, doc := range userDocs(t) {
		for _, bad := range []string{"../shared/", `meta("`, "xref:"} {
			if strings.Contains(doc, bad) {
				t.Errorf("%s holds %q", name, bad)
			}
		}
		for _, sm := range metric.FindAllStringSubmatch(doc, -1) {
			m := sm[0]
			if sm[1] != "" {
				continue
			}
			if strings.HasSuffix(m, "_ns") {
				t.Errorf("%s names %s: it is served as %s_seconds", name, m, strings.TrimSuffix(m, "_ns"))
				continue
			}
			declared := strings.Contains(code, `"`+m+`"`) ||
				strings.Contains(code, `"`+strings.TrimSuffix(m, "_seconds")+`_ns"`)
			if !declared {
				t.Errorf("%s names the metric %s, which no component declares", name, m)
			}
		}
	}
}
