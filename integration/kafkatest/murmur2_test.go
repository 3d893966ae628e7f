package kafkatest

import "testing"

func TestJavaMurmur2Vectors(t *testing.T) {
	// Kafka's UtilsTest.testMurmur2.
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := JavaMurmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestJavaPartition(t *testing.T) {
	// murmur2("foobar") = -790332482: & 0x7fffffff = 1357151166, mod 3 = 0.
	if got := JavaPartition([]byte("foobar"), 3); got != 0 {
		t.Fatalf("partition %d, want 0", got)
	}
	if got := JavaPartition([]byte("foobar"), 7); got != int32(1357151166%7) {
		t.Fatalf("partition %d, want %d", got, 1357151166%7)
	}
}
