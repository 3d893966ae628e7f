// Package docgen renders the Markdown reference of this project's components
// (docs/components/<type>/<name>.md) from their config specs, so the docs are
// written once, in the specs, and never by hand. The test in this package
// fails when the checked-in files are stale; regenerate them with
//
//	go test ./internal/docgen -update
//
// It uses ConfigView.TemplateData rather than RenderDocs, which fails on specs
// with Advanced() fields in some Benthos versions.
package docgen

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Component names one of the project's components.
type Component struct {
	Type string // inputs, outputs, caches, metrics
	Name string
}

// Components lists the components this project documents.
var Components = []Component{
	{"inputs", "kafka_native"},
	{"outputs", "kafka_eos"},
	{"caches", "kafka_state"},
	{"metrics", "prometheus"},
}

func view(env *service.Environment, c Component) (*service.ConfigView, bool) {
	switch c.Type {
	case "inputs":
		return env.GetInputConfig(c.Name)
	case "outputs":
		return env.GetOutputConfig(c.Name)
	case "caches":
		return env.GetCacheConfig(c.Name)
	case "metrics":
		return env.GetMetricsConfig(c.Name)
	}
	return nil, false
}

// Render returns the docs of every registered component in Components, keyed
// by their path below docs/components.
func Render(env *service.Environment) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, c := range Components {
		v, ok := view(env, c)
		if !ok {
			continue
		}
		data, err := v.TemplateData()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.Type, c.Name, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.Type, c.Name, err)
		}
		out[path.Join(c.Type, c.Name+".md")] = unXref(buf.Bytes())
	}
	return out, nil
}

// xrefRE matches the Antora cross-references of Benthos' own field
// descriptions (the batching policy's), which render as raw text on GitHub.
var xrefRE = regexp.MustCompile(`xref:[^\[\s]*\[([^\]]*)\]`)

// unXref keeps a cross-reference's text and drops its target: the target is
// a page of the Benthos site that these docs do not have.
func unXref(b []byte) []byte {
	return xrefRE.ReplaceAllFunc(b, func(m []byte) []byte {
		text := xrefRE.FindSubmatch(m)[1]
		if len(text) == 0 {
			return []byte("the Benthos docs")
		}
		return text
	})
}

var tmpl = template.Must(template.New("doc").Funcs(template.FuncMap{
	"cell": func(s string) string {
		s = strings.ReplaceAll(s, "\n", " ")
		return strings.ReplaceAll(s, "|", `\|`)
	},
	"join": strings.Join,
}).Parse(`<!-- Generated from the component's config spec by internal/docgen. Do not edit: run go test ./internal/docgen -update -->
# {{.Name}}

Type: {{.Type}}. Status: {{.Status}}.

{{.Summary}}

## Common configuration

` + "```yaml" + `
{{.CommonConfigYAML}}` + "```" + `

## Full configuration

` + "```yaml" + `
{{.AdvancedConfigYAML}}` + "```" + `
{{if .Description}}
## Description

{{.Description}}
{{end}}
## Fields
{{range .Fields}}
### ` + "`{{.FullName}}`" + `

{{.Description}}
{{if .IsSecret}}
This field holds a secret: it is redacted by ` + "`connect-eos echo`" + ` and never logged.
{{end}}{{if .IsInterpolated}}
This field supports interpolation functions.
{{end}}
Type: ` + "`{{.Type}}`" + `{{if .DefaultMarshalled}}. Default: ` + "`{{.DefaultMarshalled}}`" + `{{end}}.
{{if .AnnotatedOptions}}
| Option | Summary |
|---|---|
{{range .AnnotatedOptions}}| ` + "`{{index . 0}}`" + ` | {{cell (index . 1)}} |
{{end}}{{else if .Options}}
Options: {{range $i, $o := .Options}}{{if $i}}, {{end}}` + "`{{$o}}`" + `{{end}}.
{{end}}{{if .ExamplesMarshalled}}
Examples:
{{range .ExamplesMarshalled}}
` + "```yaml" + `
{{.}}
` + "```" + `
{{end}}{{end}}{{end}}{{if .Examples}}
## Examples
{{range .Examples}}
### {{.Title}}

{{.Summary}}

` + "```yaml" + `
{{.Config}}
` + "```" + `
{{end}}{{end}}{{if .Footnotes}}
{{.Footnotes}}
{{end}}`))
