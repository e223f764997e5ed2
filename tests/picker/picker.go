// An endpoint picker's metrics read, as the Gateway API Inference Extension's EPP and llm-d's
// scheduler do it (pkg/epp/datalayer/metrics): the URL is built with url.URL{Scheme, Host,
// Path}, fetched with Go's default transport (which asks for gzip), parsed with
// prometheus/common's expfmt.TextParser; for each metric spec the family is looked up by name,
// its series filtered by the spec's labels, and the one with the latest timestamp kept (engines
// set none, so the first).
//
//	picker -host 127.0.0.1:8081 -path /metrics/router 'vllm:num_requests_waiting' 'nv_trt_llm_request_metrics{request_type=waiting}'
//
// Prints one JSON object per spec: {"spec", "type", "value", "matching"} or {"spec", "error"}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
)

type spec struct {
	name   string
	labels map[string]string
}

func parseSpec(s string) spec {
	out := spec{name: s, labels: map[string]string{}}
	if i := strings.IndexByte(s, '{'); i >= 0 {
		out.name = s[:i]
		for _, pair := range strings.Split(strings.TrimSuffix(s[i+1:], "}"), ",") {
			if kv := strings.SplitN(pair, "=", 2); len(kv) == 2 {
				out.labels[strings.TrimSpace(kv[0])] = strings.Trim(strings.TrimSpace(kv[1]), `"`)
			}
		}
	}
	return out
}

func main() {
	host := flag.String("host", "", "host:port of the metrics endpoint")
	path := flag.String("path", "/metrics", "the configured metrics path")
	flag.Parse()
	target := &url.URL{Scheme: "http", Host: *host, Path: *path}
	client := &http.Client{Transport: http.DefaultTransport, Timeout: 5 * time.Second}
	resp, err := client.Get(target.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "status:", resp.StatusCode, "for", target.String())
		os.Exit(1)
	}
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "parse:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, arg := range flag.Args() {
		sp := parseSpec(arg)
		out := map[string]interface{}{"spec": arg}
		mf, ok := families[sp.name]
		if !ok {
			out["error"] = "family not found"
			_ = enc.Encode(out)
			continue
		}
		matching := 0
		latestTs := int64(-1)
		var value float64
		for _, m := range mf.GetMetric() {
			match := true
			for k, v := range sp.labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				match = match && found
			}
			if !match {
				continue
			}
			matching++
			if m.GetTimestampMs() > latestTs {
				latestTs = m.GetTimestampMs()
				value = m.GetGauge().GetValue()
			}
		}
		out["type"] = mf.GetType().String()
		out["matching"] = matching
		out["value"] = strconv.FormatFloat(value, 'g', -1, 64)
		_ = enc.Encode(out)
	}
}
