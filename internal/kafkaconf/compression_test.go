package kafkaconf

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompression: every name maps to its own codec, and anything else
// (none, empty, unknown) to no compression, not franz-go's default snappy.
func TestCompression(t *testing.T) {
	want := map[string]kgo.CompressionCodec{
		"none":   kgo.NoCompression(),
		"gzip":   kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(),
		"lz4":    kgo.Lz4Compression(),
		"zstd":   kgo.ZstdCompression(),
		"":       kgo.NoCompression(),
		"brotli": kgo.NoCompression(),
	}
	for _, n := range CompressionNames {
		require.Contains(t, want, n)
	}
	for name, codec := range want {
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), Compression(name))
		require.NoError(t, err)
		got := cl.OptValue(kgo.ProducerBatchCompression)
		cl.Close()
		require.Equal(t, []kgo.CompressionCodec{codec}, got, name)
	}
}
