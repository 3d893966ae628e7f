package kafkaconf

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

// TestEnumFieldLint: a value outside the options fails lint with an error
// naming the field and every valid value; a valid value lints clean.
func TestEnumFieldLint(t *testing.T) {
	spec := service.NewConfigSpec().Field(
		service.NewObjectField("outer", EnumField("outer.mode", "fast", "safe").Default("safe")),
	)
	env := service.NewEmptyEnvironment()
	require.NoError(t, env.RegisterInput("enum_test", spec, func(*service.ParsedConfig, *service.Resources) (service.Input, error) {
		return nil, nil
	}))
	for _, tc := range []struct{ value, want string }{
		{"fast", ""},
		{"safe", ""},
		{"quick", "field outer.mode: value quick is not one of: fast, safe"},
		{"FAST", "field outer.mode: value FAST is not one of: fast, safe"},
	} {
		err := env.NewStreamBuilder().AddInputYAML("enum_test:\n  outer:\n    mode: " + tc.value + "\n")
		if tc.want == "" {
			require.NoError(t, err, tc.value)
			continue
		}
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "not a valid option for this field", "Benthos' own message, which names neither")
	}
}
