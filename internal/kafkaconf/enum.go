package kafkaconf

import (
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// EnumField is a string field with a fixed set of values, like Benthos'
// NewStringEnumField, whose lint error names the field (path, e.g.
// "sasl.mechanism") and the valid values; Benthos' own says only "value X is
// not a valid option for this field". Values are matched exactly, as the
// components compare them.
func EnumField(path string, options ...string) *service.ConfigField {
	name := path[strings.LastIndexByte(path, '.')+1:]
	return service.NewStringEnumField(name, options...).LintRule(enumLint(path, options, ""))
}

// enumLint is the lint rule of EnumField. hint, when set, is appended to the
// error (what to write instead of a known foreign value).
func enumLint(path string, options []string, hint string) string {
	quoted := make([]string, len(options))
	for i, o := range options {
		quoted[i] = fmt.Sprintf("%q", o)
	}
	return fmt.Sprintf(`root = if this.type() == "string" && ![ %s ].contains(this) {
  "field %s: value %%v is not one of: %s%s".format(this)
}`, strings.Join(quoted, ", "), path, strings.Join(options, ", "), hint)
}
