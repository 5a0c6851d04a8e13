package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// telemetry is the service's OpenTelemetry set-up: metrics served in the
// Prometheus format at /metrics, and traces and metrics exported over
// OTLP/HTTP when the standard OTEL_EXPORTER_OTLP_* variables name an
// endpoint (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES describe the
// service; the exporters read their own variables: headers, timeouts,
// TLS). Without an OTLP trace endpoint no span is recorded, but a
// caller's traceparent is still carried to the instances it starts.
type telemetry struct {
	tracer  trace.TracerProvider
	meter   *sdkmetric.MeterProvider
	metrics http.Handler
	// own reads the service's own metrics on demand (the sampler behind
	// GET /v1/engine's figures).
	own  *sdkmetric.ManualReader
	stop []func(context.Context) error
}

// newTelemetry builds the set-up from the environment (getenv).
func newTelemetry(ctx context.Context, getenv func(string) string) (*telemetry, error) {
	name := or(getenv("OTEL_SERVICE_NAME"), "durafeed-service")
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &telemetry{tracer: tracenoop.NewTracerProvider(), own: sdkmetric.NewManualReader()}
	reg := prometheus.NewRegistry()
	prom, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	readers := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom), sdkmetric.WithReader(t.own)}
	if url := otlpURL(getenv, "METRICS", "/v1/metrics"); url != "" {
		exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(url))
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	t.meter = sdkmetric.NewMeterProvider(readers...)
	t.stop = append(t.stop, t.meter.Shutdown)
	if url := otlpURL(getenv, "TRACES", "/v1/traces"); url != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url))
		if err != nil {
			_ = t.shutdown(ctx)
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		t.tracer = tp
		t.stop = append(t.stop, tp.Shutdown)
	}
	return t, nil
}

// otlpURL is the OTLP/HTTP URL of a signal, as the specification's
// variables give it: OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT as is, else
// OTEL_EXPORTER_OTLP_ENDPOINT with the signal's path; "" for none.
func otlpURL(getenv func(string) string, signal, path string) string {
	if u := getenv("OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"); u != "" {
		return u
	}
	if u := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); u != "" {
		return strings.TrimSuffix(u, "/") + path
	}
	return ""
}

// shutdown flushes and stops the exporters (bounded by ctx).
func (t *telemetry) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for _, stop := range t.stop {
		errs = append(errs, stop(ctx))
	}
	return errors.Join(errs...)
}
