package promexport

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
)

// TestExporterServesPrometheusText runs a stream with `metrics: prometheus`
// and scrapes the handler Benthos would mount on /metrics.
func TestExporterServesPrometheusText(t *testing.T) {
	var exp *Exporter
	env := service.NewEnvironment()
	require.NoError(t, env.RegisterMetricsExporter("prom_under_test", Spec(), func(conf *service.ParsedConfig, _ *service.Logger) (service.MetricsExporter, error) {
		var err error
		exp, err = NewFromParsed(conf)
		return exp, err
	}))
	sb := env.NewStreamBuilder()
	require.NoError(t, sb.SetYAML(`
input:
  generate:
    count: 5
    interval: ""
    mapping: 'root = "x"'
output:
  drop: {}
`))
	require.NoError(t, sb.SetMetricsYAML("prom_under_test:\n  use_histogram_timing: true\n"))
	stream, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, stream.Run(ctx))

	rec := httptest.NewRecorder()
	exp.HandlerFunc()(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	require.Contains(t, text, `output_sent{label="",path="root.output"} 5`)
	require.Contains(t, text, "# TYPE output_latency_seconds histogram")
	require.NotContains(t, text, "_ns")
}

func TestSanitizeAndTimerNames(t *testing.T) {
	for in, want := range map[string]string{
		"input_received": "input_received",
		"kafka.eos-x":    "kafka_eos_x",
		"9lives":         "_9lives",
	} {
		require.Equal(t, want, sanitize(in))
	}
	require.Equal(t, "input_latency_seconds", timerName("input_latency_ns"))
	require.Equal(t, "epoch_commit_seconds", timerName("epoch_commit_seconds"))
	require.Equal(t, "x_seconds", timerName("x"))
}

// TestConflictingRegistrationDoesNotPanic: a name reused with another type
// gets a detached collector instead of a registry panic.
func TestConflictingRegistrationDoesNotPanic(t *testing.T) {
	e := New()
	e.NewCounterCtor("dup", "a")("1").Incr(1)
	e.NewGaugeCtor("dup", "a")("1").Set(3)
	mfs, err := e.Registry().Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	require.True(t, strings.Contains(mfs[0].String(), "value:1"), mfs[0].String())
}
