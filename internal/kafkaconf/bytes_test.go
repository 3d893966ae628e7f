package kafkaconf

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

func TestFieldBytes(t *testing.T) {
	spec := service.NewConfigSpec().Field(BytesField("size").Default(1 << 20))
	for _, tc := range []struct {
		yaml string
		want int64
	}{
		{"size: 512", 512},
		{"size: 1MiB", 1 << 20},
		{"size: 50mib", 50 << 20},
		{"size: 100MB", 100 * 1000 * 1000},
		{"size: 1MB", 1000 * 1000},
		{"size: '64 KiB'", 64 << 10},
		{"size: 7B", 7},
		{"{}", 1 << 20},
	} {
		pc, err := spec.ParseYAML(tc.yaml, nil)
		require.NoError(t, err, tc.yaml)
		n, err := FieldBytes(pc, "size")
		require.NoError(t, err, tc.yaml)
		require.Equal(t, tc.want, n, tc.yaml)
	}
	pc, err := spec.ParseYAML("size: lots", nil)
	require.NoError(t, err)
	_, err = FieldBytes(pc, "size")
	require.ErrorContains(t, err, `"lots" is not a byte size`)
}
