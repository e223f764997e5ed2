-- Caps a wrk run by request count as well as by time (-d; wrk runs for all of it even when the
-- cap stops the sending), and prints one JSON line with
-- what bench/load/run.py needs. WRK_MAX_REQUESTS caps the requests each wrk thread sends.
local max_requests = tonumber(os.getenv("WRK_MAX_REQUESTS") or "200000")
local sent = 0

request = function()
  sent = sent + 1
  if sent > max_requests then
    wrk.thread:stop()
  end
  return wrk.format("GET")
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"errors":%d,"non2xx":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
