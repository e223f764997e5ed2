//! Single numbers read straight off an engine page's text: the process start time (a restart)
//! and the KV cache usage, which the check's reading does not carry. The first sample of the
//! name counts; a page without it gives `None`.

use memchr::memmem;

/// The KV cache usage gauges (0–1) of the engines sysport knows, in the order tried: vLLM's
/// (and its older name), SGLang's, llama-server's.
const KV_CACHE: [&str; 4] = [
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
];

/// The KV cache usage the page shows, where it shows one.
pub(super) fn kv_cache(page: &[u8]) -> Option<f64> {
    KV_CACHE.iter().find_map(|name| value(page, name))
}

/// The value of the first sample of family `name` on `page` (text or OpenMetrics).
pub(super) fn value(page: &[u8], name: &str) -> Option<f64> {
    let mut from = 0;
    while let Some(found) = memmem::find(&page[from..], name.as_bytes()) {
        let start = from + found;
        from = start + name.len();
        let line_start = start == 0 || page[start - 1] == b'\n';
        let rest = &page[from..];
        let line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
        if !line_start {
            continue;
        }
        let after = match line.first() {
            Some(b' ') => line,
            // Labels: the value follows the closing brace (a label value with `}` in it is
            // not one these families have).
            Some(b'{') => &line[memchr::memrchr(b'}', line)? + 1..],
            _ => continue,
        };
        let text = std::str::from_utf8(after).ok()?;
        return text.split_whitespace().next()?.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_sample_of_the_family_not_a_longer_name() {
        let page = b"# HELP process_start_time_seconds Start time.\n\
            process_start_time_seconds_x 9\n\
            process_start_time_seconds 1.7e9\n";
        assert_eq!(value(page, "process_start_time_seconds"), Some(1.7e9));
        let labelled = b"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25 123\n";
        assert_eq!(kv_cache(labelled), Some(0.25));
        assert_eq!(value(b"other 1\n", "process_start_time_seconds"), None);
    }
}
