// Package promexport is a Benthos metrics exporter named `prometheus` that
// serves the stream's metrics in the Prometheus text format on the Benthos HTTP
// server's /metrics endpoint (http.address: 127.0.0.1:4195 by default in the
// connect-eos binary, Benthos' 0.0.0.0:4195 in other builds), as users
// of Redpanda Connect expect. Benthos core ships no Prometheus exporter, and
// this project may not import Redpanda Connect's, so it is written here on
// github.com/prometheus/client_golang.
package promexport

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Field names of the exporter's config.
const (
	fieldUseHistogramTiming = "use_histogram_timing"
	fieldHistogramBuckets   = "histogram_buckets"
	fieldAddProcessMetrics  = "add_process_metrics"
	fieldAddGoMetrics       = "add_go_metrics"
)

// Spec is the config spec of the `prometheus` metrics exporter.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Summary("Serves metrics in the Prometheus text format on the HTTP server's `/metrics` endpoint.").
		Description("Timings are exported in seconds. By default they are summaries with the 0.5, 0.9 and 0.99 quantiles; set `use_histogram_timing` for histograms that can be aggregated across instances.").
		Fields(
			service.NewBoolField(fieldUseHistogramTiming).
				Description("Export timing metrics as histograms instead of summaries.").
				Default(false),
			service.NewFloatListField(fieldHistogramBuckets).
				Description("Bucket upper bounds in seconds for histogram timings. Empty means the client library's defaults (5 ms .. 10 s).").
				Default([]any{}).
				Advanced(),
			service.NewBoolField(fieldAddProcessMetrics).
				Description("Also export process metrics (CPU, resident memory, open files) of this process.").
				Default(false),
			service.NewBoolField(fieldAddGoMetrics).
				Description("Also export Go runtime metrics (goroutines, GC, heap).").
				Default(false),
		)
}

func init() {
	if err := service.RegisterMetricsExporter("prometheus", Spec(), func(conf *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
		return NewFromParsed(conf)
	}); err != nil {
		panic(err)
	}
}

// Exporter implements service.MetricsExporter on its own registry.
type Exporter struct {
	reg        *prometheus.Registry
	histograms bool
	buckets    []float64

	mu    sync.Mutex
	known map[string]prometheus.Collector
}

// NewFromParsed returns an exporter configured by a config of Spec.
func NewFromParsed(conf *service.ParsedConfig) (*Exporter, error) {
	e := &Exporter{reg: prometheus.NewRegistry(), known: map[string]prometheus.Collector{}}
	var err error
	if e.histograms, err = conf.FieldBool(fieldUseHistogramTiming); err != nil {
		return nil, err
	}
	if e.buckets, err = conf.FieldFloatList(fieldHistogramBuckets); err != nil {
		return nil, err
	}
	if len(e.buckets) == 0 {
		e.buckets = prometheus.DefBuckets
	}
	if on, _ := conf.FieldBool(fieldAddProcessMetrics); on {
		e.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if on, _ := conf.FieldBool(fieldAddGoMetrics); on {
		e.reg.MustRegister(collectors.NewGoCollector())
	}
	return e, nil
}

// New returns an exporter with default settings on its own registry; used by
// tests and by callers that embed the exporter.
func New() *Exporter {
	return &Exporter{reg: prometheus.NewRegistry(), known: map[string]prometheus.Collector{}, buckets: prometheus.DefBuckets}
}

// Registry exposes the registry, so an embedding program can gather from it.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

var invalidChars = regexp.MustCompile(`[^a-zA-Z0-9_:]`)

// sanitize turns a Benthos metric or label name into a valid Prometheus one.
func sanitize(name string) string {
	name = invalidChars.ReplaceAllString(name, "_")
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	return name
}

func timerName(name string) string {
	name = strings.TrimSuffix(name, "_ns")
	if !strings.HasSuffix(name, "_seconds") {
		name += "_seconds"
	}
	return name
}

func sanitizeAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = sanitize(s)
	}
	return out
}

// collector registers a collector once per name and returns the one that
// holds that name. Benthos asks for the same metric from every component
// instance, so a second request must share the first collector; a name asked
// for again with another type or label set gets a detached collector (its
// values are dropped) rather than a panic.
func (e *Exporter) collector(name string, mk func() prometheus.Collector) prometheus.Collector {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.known[name]; ok {
		return c
	}
	c := mk()
	if err := e.reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			c = are.ExistingCollector
		}
	}
	e.known[name] = c
	return c
}

// NewCounterCtor implements service.MetricsExporter.
func (e *Exporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	name = sanitize(name)
	c := e.collector(name, func() prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "Benthos counter " + name}, sanitizeAll(labelKeys))
	})
	vec, ok := c.(*prometheus.CounterVec)
	return func(labelValues ...string) service.MetricsExporterCounter {
		if !ok {
			return noop{}
		}
		m, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			return noop{}
		}
		return counter{m}
	}
}

// NewGaugeCtor implements service.MetricsExporter.
func (e *Exporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	name = sanitize(name)
	c := e.collector(name, func() prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "Benthos gauge " + name}, sanitizeAll(labelKeys))
	})
	vec, ok := c.(*prometheus.GaugeVec)
	return func(labelValues ...string) service.MetricsExporterGauge {
		if !ok {
			return noop{}
		}
		m, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			return noop{}
		}
		return gauge{m}
	}
}

// NewTimerCtor implements service.MetricsExporter. Benthos reports timings in
// nanoseconds and names them with an `_ns` suffix; they are observed in
// seconds, the Prometheus base unit, under the name with `_seconds` in place
// of `_ns` (input_latency_ns becomes input_latency_seconds).
func (e *Exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	name = timerName(sanitize(name))
	keys := sanitizeAll(labelKeys)
	var c prometheus.Collector
	if e.histograms {
		c = e.collector(name, func() prometheus.Collector {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "Benthos timing " + name + " in seconds", Buckets: e.buckets}, keys)
		})
	} else {
		c = e.collector(name, func() prometheus.Collector {
			return prometheus.NewSummaryVec(prometheus.SummaryOpts{
				Name: name, Help: "Benthos timing " + name + " in seconds",
				Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
				MaxAge:     time.Minute,
			}, keys)
		})
	}
	vec, ok := c.(interface {
		GetMetricWithLabelValues(...string) (prometheus.Observer, error)
	})
	return func(labelValues ...string) service.MetricsExporterTimer {
		if !ok {
			return noop{}
		}
		m, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			return noop{}
		}
		return timer{m}
	}
}

// HandlerFunc is picked up by Benthos to serve /metrics.
func (e *Exporter) HandlerFunc() http.HandlerFunc {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}).ServeHTTP
}

// Close implements service.MetricsExporter.
func (e *Exporter) Close(context.Context) error { return nil }

type counter struct{ c prometheus.Counter }

func (c counter) Incr(n int64) { c.c.Add(float64(n)) }

type gauge struct{ g prometheus.Gauge }

func (g gauge) Set(v int64)             { g.g.Set(float64(v)) }
func (g gauge) SetFloat64(v float64)    { g.g.Set(v) }
func (g gauge) IncrFloat64(v float64)   { g.g.Add(v) }
func (g gauge) DecrFloat64(v float64)   { g.g.Sub(v) }
func (t timer) Timing(deltaNanos int64) { t.o.Observe(float64(deltaNanos) / 1e9) }

type timer struct{ o prometheus.Observer }

type noop struct{}

func (noop) Incr(int64)   {}
func (noop) Set(int64)    {}
func (noop) Timing(int64) {}
