package kafkaconf

import "github.com/twmb/franz-go/pkg/kgo"

// CompressionNames are the batch compression codecs a producer of this
// project can be configured with (the kafka_eos output's compression field,
// the benchmark's -p-compression flag), in the order the docs list them.
var CompressionNames = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// Compression is the franz-go option that compresses produced batches with
// the codec named (one of CompressionNames). Any other name, "none"
// included, means no compression, franz-go's own default being snappy: the
// components here default to none, like the Java client.
func Compression(name string) kgo.Opt {
	var c kgo.CompressionCodec
	switch name {
	case "gzip":
		c = kgo.GzipCompression()
	case "snappy":
		c = kgo.SnappyCompression()
	case "lz4":
		c = kgo.Lz4Compression()
	case "zstd":
		c = kgo.ZstdCompression()
	default:
		c = kgo.NoCompression()
	}
	return kgo.ProducerBatchCompression(c)
}
