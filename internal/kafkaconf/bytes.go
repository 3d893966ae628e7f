package kafkaconf

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Byte sizes are integers in this project's configs, and Redpanda Connect
// writes them as strings ("1MiB", "50mib", "100MB"): a byte-size field takes
// both. Units are case-insensitive: B, KB, MB, GB (powers of 1000) and KiB,
// MiB, GiB (powers of 1024), as Redpanda Connect reads them.

// A sign is read so that a negative size gets its field's range error.
var byteSizeRE = regexp.MustCompile(`(?i)^\s*(-?[0-9]+)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$`)

var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// ParseBytes reads a byte size: an integer, or an integer with a unit.
func ParseBytes(s string) (int64, error) {
	m := byteSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a byte size (an integer, or one with a unit: B, KB, KiB, MB, MiB, GB, GiB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a byte size: %v", s, err)
	}
	unit := byteUnits[strings.ToLower(m[2])]
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * unit, nil
}

// BytesField is a field of a byte size: an integer or a byte-size string.
// (It is a string field: Benthos refuses a string in an integer field when
// it parses the config.) Its lint rule rejects a value that is no byte size,
// naming the field (path, e.g. "epoch.max_bytes"). A component's own lint
// rule reads the value as a number with .int64().catch(default): a string
// with a unit is then bounded at construction only.
func BytesField(path string) *service.ConfigField {
	name := path[strings.LastIndexByte(path, '.')+1:]
	return service.NewStringField(name).LintRule(fmt.Sprintf(`root = if this.type() != "number" && !this.string().re_match("(?i)^\\s*-?[0-9]+\\s*(b|kb|kib|mb|mib|gb|gib)?\\s*$") {
  "field %s: %%v is not a byte size (an integer, or one with a unit: B, KB, KiB, MB, MiB, GB, GiB)".format(this)
}`, path))
}

// FieldBytes reads a BytesField at path. Its errors do not name the field:
// the caller does.
func FieldBytes(conf *service.ParsedConfig, path ...string) (int64, error) {
	s, err := conf.FieldString(path...)
	if err != nil {
		// An integer default (the components' defaults are integers).
		n, ierr := conf.FieldInt(path...)
		if ierr != nil {
			return 0, err
		}
		return int64(n), nil
	}
	return ParseBytes(s)
}
