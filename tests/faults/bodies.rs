//! Upstream bodies: the healthy vLLM-like page every test merges with, and the hostile ones.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};

/// What a healthy vLLM worker serves (trimmed from `tests/fixtures/small.prom`), with a Python
/// runtime family that the `vllm:` prefix drops.
pub(crate) const HEALTHY: &str = "\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation=\"0\"} 2164.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.42
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 123456.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 7.0
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 9.0
vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 9.0
vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 6.25
";

/// The sample lines of [`HEALTHY`] that sysport must pass through byte for byte.
pub(crate) fn healthy_series() -> impl Iterator<Item = &'static str> {
    HEALTHY.lines().filter(|l| l.starts_with("vllm:"))
}

/// Text and binary garbage around two good lines.
pub(crate) fn garbage() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"# TYPE vllm:faulty_ok gauge\nvllm:faulty_ok{kept=\"yes\"} 1\n");
    b.extend_from_slice(b"\xff\xfe\x00\x01binary\x7f\x80\n");
    b.extend_from_slice(b"\x00\x00\x00\x00\n");
    b.extend_from_slice(b"{\"json\": \"is not an exposition\"}\n");
    b.extend_from_slice(b"vllm:broken{label=\"unterminated} 1\n");
    b.extend_from_slice(b"vllm:no_value\n");
    b.extend_from_slice(b"vllm:bad_value{a=\"b\"} one\n");
    b.extend_from_slice(b"vllm:nul_in_value{a=\"x\x00y\"} 1\n");
    // Bytes of every value, in a deterministic order, cut into lines.
    let mut x: u32 = 0x9e37_79b9;
    for i in 0..4096u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b.push(if i % 97 == 96 { b'\n' } else { (x >> 24) as u8 });
    }
    b.extend_from_slice(b"\n# TYPE vllm:faulty_after gauge\nvllm:faulty_after 2\n");
    b
}

/// Label values that are not UTF-8, between valid series.
pub(crate) fn invalid_utf8_labels() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(
        b"# HELP vllm:utf8_test Label values in and out of UTF-8.\n# TYPE vllm:utf8_test gauge\n",
    );
    b.extend_from_slice(b"vllm:utf8_test{v=\"ok\"} 1\n");
    b.extend_from_slice(b"vllm:utf8_test{v=\"bad\xff\xfe\"} 2\n");
    b.extend_from_slice(b"vllm:utf8_test{v=\"\xc3\x28\"} 3\n");
    b.extend_from_slice(b"vllm:utf8_test{v=\"\xed\xa0\x80surrogate\"} 4\n");
    b.extend_from_slice("vllm:utf8_test{v=\"caf\u{e9} \u{1f680}\"} 5\n".as_bytes());
    b.extend_from_slice(b"# TYPE vllm:utf8_after gauge\nvllm:utf8_after 6\n");
    b
}

/// Two OpenMetrics bodies glued together, as a buggy multi-registry exporter sends them.
pub(crate) const OPENMETRICS_TWO_EOF: &str = "\
# TYPE vllm:om_first counter
# HELP vllm:om_first First half.
vllm:om_first_total{engine=\"0\"} 17.0
vllm:om_first_created{engine=\"0\"} 1.7e+09
# EOF
# TYPE vllm:om_second gauge
# HELP vllm:om_second Second half.
vllm:om_second{engine=\"0\"} 4.0
# EOF
";

/// Samples of two families (and a histogram's series) taking turns.
pub(crate) const INTERLEAVED: &str = "\
# HELP vllm:il_a A.
# TYPE vllm:il_a gauge
vllm:il_a{x=\"1\"} 1
# HELP vllm:il_b B.
# TYPE vllm:il_b gauge
vllm:il_b{x=\"1\"} 2
vllm:il_a{x=\"2\"} 3
# TYPE vllm:il_h histogram
vllm:il_h_bucket{le=\"1\"} 1
vllm:il_b{x=\"2\"} 4
vllm:il_h_bucket{le=\"+Inf\"} 2
vllm:il_a{x=\"3\"} 5
vllm:il_h_sum 3
vllm:il_h_count 2
vllm:il_b{x=\"3\"} 6
";

/// `n` series under the kept prefix in as few bytes as possible (`vllm:N 1`, ~14 bytes each),
/// so a million fit under the 16 MiB body limit and only the series limit can stop them.
pub(crate) fn many_series(n: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(n * 14);
    for i in 0..n {
        b.extend_from_slice(format!("vllm:{i} 1\n").as_bytes());
    }
    b
}

/// One sample line of `len` bytes.
pub(crate) fn long_line(len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len + 1);
    b.extend_from_slice(b"vllm:long{v=\"");
    b.resize(len - 4, b'a');
    b.extend_from_slice(b"\"} 1\n");
    b
}

/// Uncompressed size of [`gzip_bomb`]: 1 GiB and one MiB of zeros.
pub(crate) const BOMB_MIB: u32 = 1025;
/// CRC-32 of [`BOMB_MIB`] MiB of zeros (`zlib.crc32(bytes(1025 << 20))`), for a valid trailer.
const BOMB_CRC32: u32 = 0x72aa_f837;

/// A valid gzip stream of [`BOMB_MIB`] MiB of zeros, about 1 MiB on the wire. Each MiB is
/// deflated with a full flush, which resets the compressor, so one compressed MiB repeats as is.
pub(crate) fn gzip_bomb() -> Bytes {
    let zeros = vec![0u8; 1 << 20];
    let mut c = Compress::new(Compression::best(), false);
    let first = deflate(&mut c, &zeros, FlushCompress::Full);
    let unit = deflate(&mut c, &zeros, FlushCompress::Full);
    assert_eq!(
        first, unit,
        "a full flush makes each MiB compress to the same bytes"
    );
    let end = deflate(&mut c, &[], FlushCompress::Finish);
    let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    for _ in 0..BOMB_MIB {
        gz.extend_from_slice(&unit);
    }
    gz.extend_from_slice(&end);
    gz.extend_from_slice(&BOMB_CRC32.to_le_bytes());
    gz.extend_from_slice(&(BOMB_MIB << 20).to_le_bytes());
    Bytes::from(gz)
}

fn deflate(c: &mut Compress, mut input: &[u8], flush: FlushCompress) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 << 10);
    loop {
        let before = c.total_in();
        c.compress_vec(input, &mut out, flush).expect("deflate");
        input = &input[(c.total_in() - before) as usize..];
        // zlib's rule: a flush is complete when it leaves output space unused.
        if input.is_empty() && out.len() < out.capacity() {
            return out;
        }
        out.reserve(4 << 10);
    }
}
