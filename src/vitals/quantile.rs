//! Prometheus' `histogram_quantile()` over classic buckets, exactly as Prometheus computes it
//! (prometheus/prometheus `promql/quantile.go`, `bucketQuantile`): buckets sorted by upper
//! bound, the same bound merged, counts made monotonic; linear within the bucket the rank falls
//! in, from 0 in the first bucket when its bound is positive (else that bound), and the
//! highest finite bound when it falls in the `+Inf` bucket.

/// One bucket: its upper bound (`le`) and its cumulative count (or rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bucket {
    pub le: f64,
    pub count: f64,
}

/// The `q`-quantile of `buckets` (any order). `None` where Prometheus answers NaN: no `+Inf`
/// bucket, fewer than two buckets, no observations, or `q` NaN.
pub(crate) fn bucket_quantile(q: f64, mut buckets: Vec<Bucket>) -> Option<f64> {
    if q.is_nan() {
        return None;
    }
    if q < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Some(f64::INFINITY);
    }
    buckets.sort_by(|a, b| a.le.total_cmp(&b.le));
    if buckets.last().is_none_or(|b| b.le != f64::INFINITY) {
        return None;
    }
    coalesce(&mut buckets);
    correct_precision_errors(&mut buckets, 1e-12);
    ensure_monotonic(&mut buckets);
    if buckets.len() < 2 {
        return None;
    }
    let observations = buckets[buckets.len() - 1].count;
    if observations == 0.0 || observations.is_nan() {
        return None;
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|x| x.count < rank);
    if b == buckets.len() - 1 {
        return Some(buckets[buckets.len() - 2].le);
    }
    if b == 0 && buckets[0].le <= 0.0 {
        return Some(buckets[0].le);
    }
    let end = buckets[b].le;
    let mut count = buckets[b].count;
    let mut start = 0.0;
    if b > 0 {
        start = buckets[b - 1].le;
        count -= buckets[b - 1].count;
        rank -= buckets[b - 1].count;
    }
    Some(start + (end - start) * (rank / count))
}

/// Merges buckets with the same upper bound (sorted input).
fn coalesce(buckets: &mut Vec<Bucket>) {
    buckets.dedup_by(|later, kept| {
        let same = later.le == kept.le;
        if same {
            kept.count += later.count;
        }
        same
    });
}

/// Counts that differ from the one before by a relative `tolerance` or less are float noise of
/// summing rates: they take the earlier count.
fn correct_precision_errors(buckets: &mut [Bucket], tolerance: f64) {
    let mut prev = buckets[0].count;
    for b in &mut buckets[1..] {
        let delta = (b.count - prev).abs();
        if delta == 0.0 {
            continue;
        }
        if delta / b.count <= tolerance {
            b.count = prev;
        } else {
            prev = b.count;
        }
    }
}

/// The envelope: no bucket counts fewer than one below it.
fn ensure_monotonic(buckets: &mut [Bucket]) {
    let mut max = buckets[0].count;
    for b in &mut buckets[1..] {
        if b.count > max {
            max = b.count;
        } else if b.count < max {
            b.count = max;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(pairs: &[(f64, f64)]) -> Vec<Bucket> {
        pairs
            .iter()
            .map(|&(le, count)| Bucket { le, count })
            .collect()
    }

    const INF: f64 = f64::INFINITY;

    #[test]
    fn linear_within_the_bucket_the_rank_falls_in() {
        let b = buckets(&[(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (INF, 100.0)]);
        // p50: rank 50, in (0.1, 0.5] holding 50 from 10: 0.1 + 0.4 * 40/50.
        let p50 = bucket_quantile(0.5, b.clone()).expect("p50");
        assert!((p50 - 0.42).abs() < 1e-12, "{p50}");
        // p90: rank 90 = the count at 1.0, the first bucket reaching it.
        assert_eq!(bucket_quantile(0.9, b.clone()), Some(1.0));
    }

    #[test]
    fn the_first_bucket_starts_at_zero_unless_its_bound_is_not_positive() {
        let b = buckets(&[(2.0, 50.0), (4.0, 100.0), (INF, 100.0)]);
        assert_eq!(bucket_quantile(0.25, b), Some(1.0));
        let negative = buckets(&[(-1.0, 50.0), (4.0, 100.0), (INF, 100.0)]);
        assert_eq!(bucket_quantile(0.25, negative), Some(-1.0));
    }

    #[test]
    fn a_rank_in_the_inf_bucket_is_the_highest_finite_bound() {
        let b = buckets(&[(0.5, 10.0), (1.0, 20.0), (INF, 100.0)]);
        assert_eq!(bucket_quantile(0.99, b), Some(1.0));
    }

    #[test]
    fn no_observations_or_no_inf_bucket_is_none() {
        assert_eq!(
            bucket_quantile(0.5, buckets(&[(1.0, 0.0), (INF, 0.0)])),
            None
        );
        assert_eq!(
            bucket_quantile(0.5, buckets(&[(1.0, 5.0), (2.0, 10.0)])),
            None
        );
        assert_eq!(bucket_quantile(0.5, buckets(&[(INF, 10.0)])), None);
        assert_eq!(bucket_quantile(0.5, Vec::new()), None);
        assert_eq!(
            bucket_quantile(f64::NAN, buckets(&[(1.0, 5.0), (INF, 10.0)])),
            None
        );
    }

    #[test]
    fn order_repeats_and_dips_are_repaired_as_prometheus_does() {
        // Unsorted, 0.5 given twice (two series summed later), a dip at 1.0.
        let b = buckets(&[
            (INF, 100.0),
            (0.5, 30.0),
            (1.0, 50.0),
            (0.5, 30.0),
            (2.0, 100.0),
        ]);
        // Coalesced 0.5 → 60; 1.0 (50) raised to 60; p50 rank 50 falls in (0, 0.5].
        let p50 = bucket_quantile(0.5, b).expect("p50");
        assert!((p50 - 0.5 * 50.0 / 60.0).abs() < 1e-12, "{p50}");
    }

    #[test]
    fn out_of_range_q_is_infinite() {
        let b = buckets(&[(1.0, 5.0), (INF, 10.0)]);
        assert_eq!(bucket_quantile(-0.1, b.clone()), Some(f64::NEG_INFINITY));
        assert_eq!(bucket_quantile(1.5, b), Some(f64::INFINITY));
    }
}
