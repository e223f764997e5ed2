// A small OpenTelemetry Collector for sysport's OTLP checks, put together the way the
// Collector's own builder (ocb) does it: the OTLP receiver (gRPC and HTTP) and the file
// exporter (what it receives, as OTLP JSON lines), plus the debug exporter, from their Go
// modules at one release, pinned by go.sum. Built by scripts/real-tools.sh.
//
// Usage: otelcol --config FILE   (the Collector's own command line)
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

const version = "0.165.0"

func factories() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		fileexporter.NewFactory(),
		debugexporter.NewFactory(),
	); err != nil {
		return f, err
	}
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "OpenTelemetry Collector (OTLP receiver, file and debug exporters) for sysport's tests",
			Version:     version,
		},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
				},
				// As the builder's: `${VAR}` in the configuration is an environment variable.
				DefaultScheme: "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
